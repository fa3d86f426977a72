{
  "targets": [
    {
      "target_name": "flowrl_blas",
      "sources": ["flowrl_blas.c", "attention.c", "frozen.c", "onednn.c", "pool.c", "sampling.c", "layer-passes.c"],
      "cflags": ["-O3", "-std=c11"],
      "cflags!": ["-O2", "-O1", "-O0"],
      "libraries": ["-ldl", "-lm", "-lpthread"]
    }
  ]
}
