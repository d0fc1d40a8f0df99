import Foundation
import Glibc
import NIOConcurrencyHelpers
import RPCTransport

/// A child process started with `posix_spawn`, for tests that run our executables, python3 or bash.
///
/// Why not Foundation's `Process`: on Linux (swift-corelibs-foundation, Swift 6.3) `Process.run()` scans
/// `/proc/self/fd` and copies each `dirent` as a whole 280-byte struct, reading past the end of the
/// directory buffer. With about 1,360 descriptors open (the hostile-wire tests hold that many sockets
/// in this process while the CLI tests spawn `iap`) the read crosses into an unmapped page and the whole
/// test process dies with SIGSEGV. That is how CI failed on 2026-11-22; AddressSanitizer names it:
/// heap-buffer-overflow in `findMaximumOpenFromProcSelfFD`. Here the child closes every descriptor
/// above 2 itself (`posix_spawn_file_actions_addclosefrom_np`), nothing is scanned.
///
/// The exit is collected by one dedicated thread per child (blocking `waitpid`), never on the test's
/// cooperative threads, which the in-process services need.
public final class Subprocess: Sendable {
    public enum Termination: Sendable, Equatable {
        case exited(Int32)
        case signalled(Int32)

        /// The exit code, or the signal number for a killed process (as Foundation's `terminationStatus`).
        public var status: Int32 {
            switch self {
            case .exited(let code): code
            case .signalled(let signal): signal
            }
        }
    }

    /// What a finished `run` printed.
    public struct Output: Sendable {
        public var termination: Termination
        public var stdout: String
        public var stderr: String
        public var status: Int32 { termination.status }
    }

    public struct SpawnError: Error, CustomStringConvertible {
        public let description: String
    }

    public let pid: pid_t
    private let state = NIOLockedValueBox<(termination: Termination?, waiters: [CheckedContinuation<Termination, Never>])>((nil, []))

    private init(pid: pid_t) {
        self.pid = pid
    }

    /// Starts `executable` (an absolute path, or a name looked up in PATH) with `arguments`.
    /// Standard input is /dev/null; standard output and error go to the given files (created or
    /// truncated), or to /dev/null. `environment` nil inherits this process's.
    public static func spawn(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
        currentDirectory: String? = nil, stdout: String? = nil, stderr: String? = nil
    ) throws -> Subprocess {
        CooperativePoolHeartbeat.start()  // the tests that wait on children wait on the global executor too
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        try check(posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0), "stdin")
        try check(posix_spawn_file_actions_addopen(&actions, 1, stdout ?? "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0o600), "stdout")
        try check(posix_spawn_file_actions_addopen(&actions, 2, stderr ?? "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0o600), "stderr")
        guard let closeFrom = GlibcSpawnExtensions.addCloseFrom else {
            throw SpawnError(description: "posix_spawn_file_actions_addclosefrom_np is missing (glibc 2.34 or later needed)")
        }
        try check(closeFrom(&actions, 3), "closefrom")
        if let currentDirectory {
            guard let chdir = GlibcSpawnExtensions.addChdir else {
                throw SpawnError(description: "posix_spawn_file_actions_addchdir_np is missing (glibc 2.29 or later needed)")
            }
            try check(currentDirectory.withCString { chdir(&actions, $0) }, "chdir")
        }

        let argv = [executable] + arguments
        let envp = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        var pid: pid_t = 0
        let rc = withCStrings(argv) { argvPointers in
            withCStrings(envp) { envPointers in
                executable.contains("/")
                    ? posix_spawn(&pid, executable, &actions, nil, argvPointers, envPointers)
                    : posix_spawnp(&pid, executable, &actions, nil, argvPointers, envPointers)
            }
        }
        guard rc == 0 else {
            throw SpawnError(description: "cannot start \(executable): \(String(cString: strerror(rc)))")
        }
        let child = Subprocess(pid: pid)
        let reaper = Thread { child.reap() }
        reaper.name = "reap-\(pid)"
        reaper.start()
        return child
    }

    /// Runs to completion and returns what it printed (captured in temporary files, so a chatty child
    /// never blocks on a full pipe).
    public static func run(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
        currentDirectory: String? = nil
    ) async throws -> Output {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("subprocess-\(UUID().uuidString)").path
        defer {
            unlink(base + ".out")
            unlink(base + ".err")
        }
        let child = try spawn(
            executable, arguments, environment: environment, currentDirectory: currentDirectory,
            stdout: base + ".out", stderr: base + ".err")
        let termination = await child.wait()
        let read = { (path: String) in (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
        return Output(termination: termination, stdout: read(base + ".out"), stderr: read(base + ".err"))
    }

    public var isRunning: Bool { state.withLockedValue { $0.termination == nil } }

    /// Waits for the exit (returns at once if it has happened).
    public func wait() async -> Termination {
        await withCheckedContinuation { continuation in
            let done: Termination? = state.withLockedValue { state in
                if let termination = state.termination { return termination }
                state.waiters.append(continuation)
                return nil
            }
            if let done { continuation.resume(returning: done) }
        }
    }

    /// Sends `signal` unless the child has already been reaped (its pid may then belong to another process).
    public func kill(_ signal: Int32) {
        state.withLockedValue { state in
            if state.termination == nil { _ = Glibc.kill(pid, signal) }
        }
    }

    private func reap() {
        // Learn of the exit without reaping (WNOWAIT), so that `kill` under the lock can never signal a
        // recycled pid; then reap under the lock.
        var info = siginfo_t()
        while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) == -1 && errno == EINTR {}
        let (termination, waiters) = state.withLockedValue { state in
            var status: Int32 = 0
            var rc: pid_t
            repeat { rc = waitpid(pid, &status, 0) } while rc == -1 && errno == EINTR
            let termination: Termination =
                rc == -1
                ? .exited(-1)
                : (status & 0x7F) == 0 ? .exited((status >> 8) & 0xFF) : .signalled(status & 0x7F)
            state.termination = termination
            defer { state.waiters = [] }
            return (termination, state.waiters)
        }
        for waiter in waiters { waiter.resume(returning: termination) }
    }

    private static func check(_ rc: Int32, _ what: String) throws {
        guard rc == 0 else { throw SpawnError(description: "posix_spawn \(what): \(String(cString: strerror(rc)))") }
    }

    private static func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
        var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
        pointers.append(nil)
        defer { for p in pointers { free(p) } }
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}

/// glibc's `_np` spawn actions, which Swift's Glibc module does not import; looked up at run time.
private enum GlibcSpawnExtensions {
    typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    typealias AddChdir = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32

    static let addCloseFrom: AddCloseFrom? = symbol("posix_spawn_file_actions_addclosefrom_np")
    static let addChdir: AddChdir? = symbol("posix_spawn_file_actions_addchdir_np")

    private static func symbol<F>(_ name: String) -> F? {
        guard let address = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else { return nil }  // RTLD_DEFAULT
        return unsafeBitCast(address, to: F.self)
    }
}
