// tfjs variable names are global to the process; models, heads and adapters name theirs here.
let variableCount = 0;

/**
 * A process-unique tfjs variable name (tfjs names are global): an actor, a reference policy and a
 * critic can then hold parameters with the same stable names side by side.
 */
export function uniqueVariableName(name: string): string {
  return `${name}#${++variableCount}`;
}
