import Foundation
import RPCTestSupport
import Testing

/// The child-process runner every test that starts an executable uses (see `Subprocess` for why it
/// replaced Foundation's `Process`, which crashed CI when this process held ~1,360 descriptors).
@Suite struct SubprocessTests {
    @Test func aChildGetsOnlyStdioWhileThisProcessHoldsThousandsOfDescriptors() async throws {
        // Not close-on-exec on purpose: only the child's own close-from keeps these out of it.
        var held: [Int32] = []
        defer { for fd in held { close(fd) } }
        for _ in 0..<1_500 {
            let fd = open("/dev/null", O_RDONLY)
            guard fd >= 0 else { break }
            held.append(fd)
        }
        #expect(held.count == 1_500)
        for _ in 0..<20 {
            // bash execs `ls` in its own pid; 3 is ls's handle on the directory it lists.
            let run = try await Subprocess.run("bash", ["-c", "ls /proc/$$/fd"])
            #expect(run.termination == .exited(0), "\(run.stderr)")
            #expect(run.stdout.split(separator: "\n").sorted() == ["0", "1", "2", "3"])
        }
    }

    @Test func exitCodesSignalsOutputDirectoryAndEnvironment() async throws {
        let run = try await Subprocess.run(
            "bash", ["-c", "pwd; echo \"$GREETING\"; echo oops >&2; exit 3"],
            environment: ["GREETING": "hello", "PATH": "/usr/bin:/bin"],
            currentDirectory: "/tmp")
        #expect(run.termination == .exited(3))
        #expect(run.stdout == "/tmp\nhello\n")
        #expect(run.stderr == "oops\n")

        let sleeper = try Subprocess.spawn("sleep", ["30"])
        #expect(sleeper.isRunning)
        sleeper.kill(SIGKILL)
        #expect(await sleeper.wait() == .signalled(SIGKILL))
        #expect(!sleeper.isRunning)
        #expect(await sleeper.wait() == .signalled(SIGKILL))  // a second wait answers at once

        #expect(throws: Subprocess.SpawnError.self) { try Subprocess.spawn("/nonexistent/program", []) }
    }
}
