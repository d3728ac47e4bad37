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

def catch_test_with_mpi(name, srcs, deps, mpi_name, size = "small", mpi_args = ["~[local]"], **kwargs):
    """One Catch2 suite run twice: in one process, and under mpirun with 2 and 4 processes.

    Generates the cc_test `name`, the binary `<name>_mpi` (linked with //tests:mpi_catch_main,
    visible to //tests for the multi-host suite) and
    the mpi_test `mpi_name` (`<mpi_name>_np2`, `<mpi_name>_np4`).

    Args:
      name: the one-process cc_test.
      srcs: the suite's sources.
      deps: its dependencies, without a Catch2 main.
      mpi_name: prefix of the mpirun tests.
      size: size of the one-process test.
      mpi_args: arguments for the mpirun runs (by default tests tagged [local] are left out).
      **kwargs: passed on to the cc_test.
    """
    native.cc_test(
        name = name,
        size = size,
        srcs = srcs,
        deps = deps + ["//tests:catch_main"],
        **kwargs
    )
    native.cc_binary(
        name = name + "_mpi",
        testonly = True,
        srcs = srcs,
        deps = deps + ["//tests:mpi_catch_main"],
        # The multi-host suite (//tests:multi_host_*) runs it on network-namespace hosts.
        visibility = ["//tests:__pkg__"],
    )
    mpi_test(
        name = mpi_name,
        args = mpi_args,
        binary = ":%s_mpi" % name,
    )

def multi_host_test(name, programs):
    """A test of the multi-host suite: `<name>.sh <netns_cluster.sh> <programs...>`, as root.

    Each "host" is a network namespace on this machine (tools/netns_cluster.sh,
    docs/multi_host.md), MPI between hosts over TCP. It needs root and `ip netns`, outside
    Bazel's sandbox (local) and alone on the machine (exclusive: mpirun jobs of 4 processes on 2
    cores); without root it fails, saying so.

    Args:
      name: the sh_test; its script is `<name>.sh`, which sources multi_host_lib.sh.
      programs: labels passed, after the cluster script, as the script's arguments.
    """
    native.sh_test(
        name = name,
        size = "medium",
        srcs = [name + ".sh"],
        args = ["$(location //tools:netns_cluster.sh)"] + ["$(location %s)" % p for p in programs],
        data = ["multi_host_lib.sh", "//tools:netns_cluster.sh"] + programs,
        tags = ["exclusive", "local", "multi_host"],
    )

def mpirun_script_test(name, program, size = "medium"):
    """`<name>.sh <mpirun_test.sh> <program>`: a script that runs `program` in one process and
    under mpirun (through //tests:mpirun_test.sh) and compares the two.

    Args:
      name: the sh_test; its script is `<name>.sh`.
      program: label of the program the script runs.
      size: test size.
    """
    native.sh_test(
        name = name,
        size = size,
        srcs = [name + ".sh"],
        args = ["$(location //tests:mpirun_test.sh)", "$(location %s)" % program],
        data = [program, "//tests:mpirun_test.sh"],
    )
