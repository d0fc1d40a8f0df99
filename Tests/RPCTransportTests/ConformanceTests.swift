import Foundation
import RPCTestSupport
import Testing

/// Runs every golden file in Conformance/ over real TCP against a fresh server configured by the
/// file's `#!` settings.
@Suite struct ConformanceTests {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Conformance")
    static let scripts: [String] =
        (try? FileManager.default.contentsOfDirectory(atPath: folder.path))?
        .filter { $0.hasSuffix(".jsonrpc") }.sorted() ?? []

    @Test func everySpecExampleHasAGoldenFile() {
        #expect(Self.scripts.filter { $0.hasPrefix("spec-") }.count == 11)
    }

    @Test(arguments: scripts)
    func golden(_ file: String) async throws {
        let script = try WireScript.load(Self.folder.appendingPathComponent(file))
        #expect(!script.steps.isEmpty)
        let server = try await TestServer.start(settings: script.settings)
        defer { Task { await server.shutdown() } }
        let (failures, _) = try await WireScriptRunner.run(script, port: server.localPort!)
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
    }
}
