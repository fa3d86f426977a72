// Types of lavapipe.mjs for the tests that import it.
export declare const LAVAPIPE_DIR: string;
/** The environment for a process that should see the unpacked lavapipe, or why there is none. */
export declare function lavapipeEnv(): { env: Record<string, string> } | { skipped: string };
/** Downloads and unpacks the driver once; the environment, or why it was skipped. */
export declare function prepareLavapipe(options?: { log?: (line: string) => void }): { env: Record<string, string> } | { skipped: string };
