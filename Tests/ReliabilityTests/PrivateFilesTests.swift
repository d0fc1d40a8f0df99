import Foundation
import RPCTestSupport
import Testing

/// What the services keep is theirs alone: on a shared machine another user used to read the scrypt hashes
/// (`accounts.sqlite` 0644 in a 0755 directory) and the simulator's keys for a moment after they were written.
/// The real executables, started in a fresh data directory: the directory 0700, each database file 0600 (and its
/// `-wal`), each key 0600.
@Suite struct PrivateFilesTests {
    static func mode(_ path: String) -> Int? {
        (try? FileManager.default.attributesOfItem(atPath: path))?[.posixPermissions] as? Int
    }

    @Test(arguments: [
        ("accounts-service", ["accounts.sqlite"]), ("catalog-service", ["catalog.sqlite"]),
        ("appstore-sim", ["appstore-sim.sqlite", "sim-pki/jws-leaf.key", "sim-pki/receipt-leaf.key", "sim-pki/api-key.p8", "sim-pki/offer-key.p8"]),
    ])
    func dataDirectoriesAre0700AndDatabasesAndKeys0600(executable: String, files: [String]) async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("private-\(UUID().uuidString)")
        let data = root.appendingPathComponent("data")
        defer { try? FileManager.default.removeItem(at: root) }
        var arguments = ["--port", "\(try LoopbackPort.free())", "--data-dir", data.path]
        if executable == "appstore-sim" { arguments += ["--http-port", "\(try LoopbackPort.free())"] }
        if executable == "catalog-service" { arguments += ["--admin-token", String(repeating: "a", count: 40)] }
        let process = try Subprocess.spawn(BuiltExecutables.url(executable).path, arguments, environment: BuiltExecutables.environment())
        defer { process.kill(SIGKILL) }
        let deadline = Date().addingTimeInterval(180)  // generous: CI starts many processes at once on two cores
        while !files.allSatisfy({ FileManager.default.fileExists(atPath: data.appendingPathComponent($0).path) }) {
            try #require(process.isRunning && Date() < deadline, "\(executable) did not write \(files)")
            try await Task.sleep(nanoseconds: 20_000_000)  // polling for files a starting process writes, bounded
        }
        #expect(Self.mode(data.path) == 0o700, "\(executable): data directory")
        for file in files {
            let path = data.appendingPathComponent(file).path
            #expect(Self.mode(path) == 0o600, "\(executable): \(file)")
            if file.hasSuffix(".sqlite"), FileManager.default.fileExists(atPath: path + "-wal") {
                #expect(Self.mode(path + "-wal") == 0o600, "\(executable): \(file)-wal")
            }
        }
    }
}
