// The hermes tool-call format (verl v0.9.0's HermesToolParser, after vLLM's): each call is a JSON
// object {"name": ..., "arguments": {...}} between <tool_call> and </tool_call>, in text decoded with
// special tokens kept. verl drops a call it cannot decode (and, with none left, ends the
// trajectory); here a malformed call is kept as an error the policy is shown in its tool turn.

export const TOOL_CALL_OPEN = '<tool_call>';
export const TOOL_CALL_CLOSE = '</tool_call>';

export type ParsedCall = { name: string; arguments: Record<string, unknown> } | { error: string };

const CALL = /<tool_call>([\s\S]*?)<\/tool_call>/g;

/** The calls in one assistant turn, in order, and the text around them. */
export function parseHermesCalls(text: string): { content: string; calls: ParsedCall[] } {
  const calls: ParsedCall[] = [];
  for (const match of text.matchAll(CALL)) calls.push(parseCall(match[1]));
  let content = text.replace(CALL, '');
  // An opening tag with no close (the turn ended inside the call) is a call that cannot run.
  const open = content.indexOf(TOOL_CALL_OPEN);
  if (open >= 0) {
    calls.push({ error: `Invalid tool call: ${TOOL_CALL_OPEN} without ${TOOL_CALL_CLOSE}` });
    content = content.slice(0, open);
  }
  return { content: content.trim(), calls };
}

function parseCall(body: string): ParsedCall {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch (e) {
    return { error: `Invalid tool call: not JSON (${(e as Error).message})` };
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return { error: 'Invalid tool call: expected {"name": ..., "arguments": {...}}' };
  const { name, arguments: args = {} } = value as { name?: unknown; arguments?: unknown };
  if (typeof name !== 'string' || !name) return { error: 'Invalid tool call: "name" must be a non-empty string' };
  // Some models write the arguments as a JSON string (OpenAI's wire format); verl re-reads them with json.loads.
  let parsed = args;
  if (typeof args === 'string') {
    try {
      parsed = JSON.parse(args);
    } catch (e) {
      return { error: `Invalid JSON in arguments for '${name}': ${(e as Error).message}` };
    }
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return { error: `Invalid JSON in arguments for '${name}': expected an object` };
  return { name, arguments: parsed as Record<string, unknown> };
}

/** JSON as Python's json.dumps(ensure_ascii=False) writes it (", " and ": "): what Jinja's tojson gives a chat template, and vLLM's call arguments. */
export function pythonJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(pythonJson).join(', ')}]`;
  if (typeof value === 'object' && value !== null) return `{${Object.entries(value).map(([k, v]) => `${JSON.stringify(k)}: ${pythonJson(v)}`).join(', ')}}`;
  return JSON.stringify(value);
}

/**
 * An assistant turn's text with its calls as Qwen2.5's chat template writes them after the turn's
 * header: the content, then each call as "<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>",
 * a newline between each part.
 */
export function hermesTurnText(content: string, calls: { name: string; arguments: unknown }[]): string {
  const parts = calls.map((call) => `${TOOL_CALL_OPEN}\n{"name": ${JSON.stringify(call.name)}, "arguments": ${pythonJson(call.arguments)}}\n${TOOL_CALL_CLOSE}`);
  return [...(content ? [content] : []), ...parts].join('\n');
}
