#!/usr/bin/env node
// The installed command runs the compiled CLI (npm install builds dist/ through the prepare script).
import('../dist/core-adapters/cli/main.js').catch((error) => {
  if (error && error.code === 'ERR_MODULE_NOT_FOUND' && String(error.message).includes('dist/core-adapters')) {
    console.error('flowrl: dist/ is missing; run `npm install` (or `npm run build`) first');
    process.exit(1);
  }
  throw error;
});
