// tfjs-core's gradients and chained ops (t.reshape(...)) are registered by the union package
// @tensorflow/tfjs, which is loaded here with require and everything else imports tfjs-core: imported
// as an ES module, the union makes Node scan it and the five bundles it re-exports (6.6 MB) for
// export names nothing here reads, about 0.3 s of every process's start on a loaded 2-core machine.
import { createRequire } from 'node:module';
import type {} from '@tensorflow/tfjs-core/dist/public/chained_ops/register_all_chained_ops.js';

createRequire(import.meta.url)('@tensorflow/tfjs');
