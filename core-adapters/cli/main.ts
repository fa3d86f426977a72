#!/usr/bin/env node
// The flowrl command (bin/flowrl.js runs the compiled copy of this file).
import { main } from './commands.js';

process.exitCode = await main(process.argv.slice(2));
