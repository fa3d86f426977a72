// Data: verl-format rows (jsonl/parquet) and the countdown task.
export * from './rows.js';
export * from './countdown.js';
