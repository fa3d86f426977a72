/** Sources under core-adapters/ and plugin/ of `root` whose dist/ file is missing or older, relative to `root`. */
export function staleOutputs(root: string): string[];
