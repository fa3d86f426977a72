// The code sandbox's helper process (see sandbox-process.ts): one Sandbox, made from the first
// message's options, running what it is sent and answering each run by its id. It ends when the
// process that started it goes (the IPC channel closes).
import { InputError } from '../errors.js';
import { Sandbox, type RunOptions, type RunResult, type SandboxOptions } from './sandbox.js';

/** What the helper answers: a run's result, or why it could not run (InputError kept as such). */
export type SandboxHostReply = { id: number; result: RunResult } | { id: number; error: { input: boolean; message: string } };

type Message = { type: 'init'; options: SandboxOptions } | { type: 'run'; id: number; language: string; code: string; stdin: string; options: RunOptions };

let sandbox: Sandbox | undefined;
const reply = (message: SandboxHostReply) => process.send!(message);

process.on('message', (m: Message) => {
  if (m.type === 'init') {
    sandbox = new Sandbox(m.options);
    return;
  }
  sandbox!.run(m.language, m.code, m.stdin, m.options).then(
    (result) => reply({ id: m.id, result }),
    (e: Error) => reply({ id: m.id, error: { input: e instanceof InputError, message: e.message } }),
  );
});
process.on('disconnect', () => process.exit(0));
