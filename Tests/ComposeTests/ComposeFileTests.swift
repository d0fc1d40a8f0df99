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
        let schema = Self.repository.appendingPathComponent("Tests/Schemas/compose-spec.json")
        let ports = [
            "accounts=\(DefaultPorts.accounts)", "catalog=\(DefaultPorts.catalog)", "verification=\(DefaultPorts.verification)",
            "fulfillment=\(DefaultPorts.fulfillment)", "sim=\(DefaultPorts.simulator)",
        ]
        let (status, output) = try await Self.run("python3", ["compose/check_compose.py", schema.path] + ports)
        #expect(status == 0, "\(output)")
    }

    @Test func theLocalRunnerIsValidBash() async throws {
        let (status, output) = try await Self.run("bash", ["-n", "compose/up.sh"])
        #expect(status == 0, "\(output)")
    }

    /// The image and the local runner build the same way (one script), and that script builds every
    /// executable product but the benchmark, one `swift build --product` each.
    @Test func theImageAndTheLocalRunnerBuildEveryProductWithOneScript() async throws {
        let (status, output) = try await Self.run("bash", ["-n", "compose/build.sh"])
        #expect(status == 0, "\(output)")
        func read(_ path: String) throws -> String { try String(contentsOf: Self.repository.appendingPathComponent(path), encoding: .utf8) }
        let package = try read("Package.swift")
        let executables = Set(package.matches(of: /\.executable\(name: "([^"]+)"/).map { String($0.1) }).subtracting(["iap-bench"])
        let script = try read("compose/build.sh")
        let listed = script.firstMatch(of: /products=\(([^)]*)\)/).map { Set($0.1.split(separator: " ").map(String.init)) } ?? []
        #expect(listed == executables)
        #expect(script.contains(#"--product "$product""#))
        #expect(try read("compose/Dockerfile").contains("compose/build.sh /out"))
        #expect(!(try read("compose/Dockerfile").contains("--product")), "the Dockerfile builds through compose/build.sh only")
        #expect(try read("compose/up.sh").contains("compose/build.sh"))
    }
}

/// The production compose file is checked, not just parsed: a copy that trusts the simulator's roots,
/// runs the simulator, or leaves bundle ids optional is refused.
@Suite struct ComposeProductionChecks {
    static func check(after edit: (String) -> String) async throws -> (status: Int32, output: String) {
        let copy = FileManager.default.temporaryDirectory.appendingPathComponent("compose-\(UUID().uuidString)")
        try FileManager.default.copyItem(at: ComposeFileTests.repository.appendingPathComponent("compose"), to: copy)
        defer { try? FileManager.default.removeItem(at: copy) }
        let file = copy.appendingPathComponent("compose.yaml")
        try edit(try String(contentsOf: file, encoding: .utf8)).write(to: file, atomically: true, encoding: .utf8)
        let schema = ComposeFileTests.repository.appendingPathComponent("Tests/Schemas/compose-spec.json")
        let run = try await Subprocess.run("python3", [copy.appendingPathComponent("check_compose.py").path, schema.path])
        return (run.status, run.stdout + run.stderr)
    }

    @Test func productionComposeThatTrustsTheSimulatorIsRefused() async throws {
        let mounted = try await Self.check {
            $0.replacingOccurrences(of: #"volumes: ["verification-data:/data"]"#, with: #"volumes: ["verification-data:/data", "sim-data:/sim:ro"]"#)
        }
        #expect(mounted.status == 1 && mounted.output.contains("mounts the simulator's data"), "\(mounted.output)")
        let trusted = try await Self.check {
            $0.replacingOccurrences(
                of: #"      - "${IAP_VERIFICATION_PORT}"\#n"#,
                with: #"      - "${IAP_VERIFICATION_PORT}"\#n      - "--trust-anchor-dir"\#n      - "/sim/sim-pki"\#n"#)
        }
        #expect(trusted.status == 1 && trusted.output.contains("development flags"), "\(trusted.output)")
        let optional = try await Self.check { $0.replacingOccurrences(of: "${IAP_BUNDLE_IDS:?", with: "${IAP_BUNDLE_IDS:-") }
        #expect(optional.status == 1 && optional.output.contains("must require IAP_BUNDLE_IDS"), "\(optional.output)")
    }
}
