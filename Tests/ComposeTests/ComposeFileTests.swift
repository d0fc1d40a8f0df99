import Foundation
import RPCTestSupport
import ServiceSupport
import Testing

/// compose/compose.yaml against the Compose Specification's JSON Schema (Docker is not available to run
/// it), and in agreement with compose/up.sh and compose/.env: compose/check_compose.py does both.
@Suite struct ComposeFileTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    static func run(_ program: String, _ arguments: [String]) async throws -> (status: Int32, output: String) {
        let run = try await Subprocess.run(program, arguments, currentDirectory: repository.path)
        return (run.status, run.stdout + run.stderr)
    }

    @Test func composeFileIsValidAndAgreesWithTheLocalRunner() async throws {
        let schema = Self.repository.deletingLastPathComponent().appendingPathComponent("shared/schemas/compose-spec.json")
        let ports = ["accounts=\(DefaultPorts.accounts)", "catalog=\(DefaultPorts.catalog)", "verification=\(DefaultPorts.verification)",
                     "fulfillment=\(DefaultPorts.fulfillment)", "sim=\(DefaultPorts.simulator)"]
        let (status, output) = try await Self.run("python3", ["compose/check_compose.py", schema.path] + ports)
        #expect(status == 0, "\(output)")
    }

    @Test func theLocalRunnerIsValidBash() async throws {
        let (status, output) = try await Self.run("bash", ["-n", "compose/up.sh"])
        #expect(status == 0, "\(output)")
    }
}
