{
  "targets": [
    {
      "target_name": "flowrl_mpi",
      "sources": ["flowrl_mpi.c"],
      "cflags": ["-O2", "-std=c11", "<!@(mpicc --showme:compile)"],
      "libraries": ["<!@(mpicc --showme:link)", "-ldl"]
    }
  ]
}
