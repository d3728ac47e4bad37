"""mpi_test: a test binary run by mpirun with several process counts."""

def mpi_test(name, binary, processes = [2, 4], args = [], size = "medium", **kwargs):
    """One sh_test per process count, named <name>_np<k>, running `binary` under mpirun.

    Args:
      name: prefix of the generated test names.
      binary: label of a cc_binary (built with //tests:mpi_catch_main or its own main).
      processes: process counts to launch.
      args: extra arguments for the binary.
      size: test size of each generated test.
      **kwargs: passed on to every sh_test (tags, env, ...).
    """
    for k in processes:
        native.sh_test(
            name = "%s_np%d" % (name, k),
            size = size,
            srcs = ["//tests:mpirun_test.sh"],
            args = [str(k), "$(location %s)" % binary] + args,
            data = [binary, "//tests:mpirun_test.sh"],
            **kwargs
        )
