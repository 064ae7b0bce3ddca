"""What the stack launcher and the tests show of a process's log (streamstate_stack.launcher.ManagedProcess.tail)."""

from __future__ import annotations

from streamstate_stack.launcher import fold_stack_frames


def test_a_log_tail_folds_jvm_stack_frames_into_counts():
    log = [
        "ERROR query sessions failed: Python worker failed to connect back.",
        "java.net.SocketTimeoutException: Timed out",
        "\tat org.apache.spark.api.python.PythonWorkerFactory.createSimpleWorker(PythonWorkerFactory.scala:250)",
        "\tat java.base/java.lang.Thread.run(Thread.java:840)",
        "Caused by: boom",
        "\t... 12 more",
        "INFO the job gives up",
        "\tat trailing.Frame(X.java:1)",
    ]
    assert fold_stack_frames(log) == [
        log[0], log[1], "\t[2 stack frames]", "Caused by: boom", "\t[1 stack frames]", "INFO the job gives up", "\t[1 stack frames]",
    ]
