// Flat config: typescript-eslint's recommended rules on the project's TypeScript, plus the
// type-aware promise rules: reads are asynchronous (a GPU backend reads only that way), so an
// un-awaited step, save or sample is a bug the compiler alone does not catch.
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'runs/**', 'test/fixtures/**', '.tmp/**', '.gpu/**', 'native/build/**'] },
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-non-null-assertion': 'off',
    },
  },
  // CommonJS config files (mocha's) load their modules with require.
  { files: ['**/*.cjs'], rules: { '@typescript-eslint/no-require-imports': 'off' } },
  {
    // The files tsconfig.json compiles (scripts/ are run by tsx, outside the project).
    files: ['core-adapters/**/*.ts', 'plugin/**/*.ts', 'test/**/*.ts', 'examples/**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
    },
  },
);
