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
            "fulfillment=\(DefaultPorts.fulfillment)", "sim=\(DefaultPorts.simulator)", "play_sim=\(DefaultPorts.playSimulator)",
        ]
        let (status, output) = try await Self.run(Judges.pythonOrSystem, ["compose/check_compose.py", schema.path] + ports)
        #expect(status == 0, "\(output)")
    }

    @Test func theLocalRunnerIsValidBash() async throws {
        let (status, output) = try await Self.run("bash", ["-n", "compose/up.sh"])
        #expect(status == 0, "\(output)")
    }

    /// up.sh's log files stay bounded: past the size limit a log moves to .1 (and .1 to .2 ...), the oldest dropped,
    /// and what is kept is the newest lines, in order, none lost between the files.
    @Test func theLocalRunnersLogsAreRotated() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rotate-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let log = dir.appendingPathComponent("svc.log").path
        let script = """
            eval "$(sed -n '/^rotate() {/,/^}/p' compose/up.sh)"
            seq 1 2000 | IAP_LOG_MAX_BYTES=1000 IAP_LOG_KEEP=3 rotate \(log)
            """
        let (status, output) = try await Self.run("bash", ["-c", script])
        #expect(status == 0, "\(output)")
        let files = [log + ".3", log + ".2", log + ".1", log]
        #expect(!FileManager.default.fileExists(atPath: log + ".4"), "only IAP_LOG_KEEP old files are kept")
        var kept: [Int] = []
        for file in files {
            let text = try String(contentsOfFile: file, encoding: .utf8)
            #expect(text.utf8.count <= 1000 + 5, "\(file) is \(text.utf8.count) bytes")
            kept += text.split(separator: "\n").compactMap { Int($0) }
        }
        #expect(kept.last == 2000)
        #expect(kept == Array((kept.first ?? 0)...2000), "the newest lines, in order, none missing")
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
    static func check(file name: String = "compose.yaml", after edit: (String) -> String) async throws -> (status: Int32, output: String) {
        let copy = FileManager.default.temporaryDirectory.appendingPathComponent("compose-\(UUID().uuidString)")
        try FileManager.default.copyItem(at: ComposeFileTests.repository.appendingPathComponent("compose"), to: copy)
        defer { try? FileManager.default.removeItem(at: copy) }
        let file = copy.appendingPathComponent(name)
        try edit(try String(contentsOf: file, encoding: .utf8)).write(to: file, atomically: true, encoding: .utf8)
        let schema = ComposeFileTests.repository.appendingPathComponent("Tests/Schemas/compose-spec.json")
        let run = try await Subprocess.run(Judges.pythonOrSystem, [copy.appendingPathComponent("check_compose.py").path, schema.path])
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
        // A seed on every start would undo an operator's changes to those products: production seeds nothing.
        let seeded = try await Self.check {
            $0.replacingOccurrences(
                of: #"command: ["catalog-service", "--port", "${IAP_CATALOG_PORT}"]"#,
                with: #"command: ["catalog-service", "--port", "${IAP_CATALOG_PORT}", "--seed", "/etc/iap/demo-catalog.json"]"#)
        }
        #expect(seeded.status == 1 && seeded.output.contains("production seeds nothing"), "\(seeded.output)")
        let optional = try await Self.check { $0.replacingOccurrences(of: "${IAP_BUNDLE_IDS:?", with: "${IAP_BUNDLE_IDS:-") }
        #expect(optional.status == 1 && optional.output.contains("must require IAP_BUNDLE_IDS"), "\(optional.output)")
    }

    @Test func aServiceGivenATokenItDoesNotNeedIsRefused() async throws {
        let accountsWithAdmin = try await Self.check {
            $0.replacingOccurrences(
                of: "      IAP_INTERNAL_TOKEN: *internal-token\n    volumes: [\"accounts-data:/data\"]",
                with: "      IAP_INTERNAL_TOKEN: *internal-token\n      IAP_ADMIN_TOKEN: *admin-token\n    volumes: [\"accounts-data:/data\"]")
        }
        #expect(accountsWithAdmin.status == 1 && accountsWithAdmin.output.contains("accounts: given tokens"), "\(accountsWithAdmin.output)")
        let scaledWithoutDatabase = try await Self.check(file: "compose.postgres.yaml") {
            $0.replacingOccurrences(of: "      IAP_DATABASE_URL: *accounts-database\n      IAP_INTERNAL_TOKEN", with: "      IAP_INTERNAL_TOKEN")
        }
        #expect(
            scaledWithoutDatabase.status == 1 && scaledWithoutDatabase.output.contains("accounts-2 is not on PostgreSQL"),
            "\(scaledWithoutDatabase.output)")
        // Each service signs in as its own login: fulfillment on accounts' would own accounts' tables too.
        let sharedLogin = try await Self.check(file: "compose.postgres.yaml") {
            $0.replacingOccurrences(of: "      IAP_DATABASE_URL: *fulfillment-database", with: "      IAP_DATABASE_URL: *accounts-database")
        }
        #expect(
            sharedLogin.status == 1 && sharedLogin.output.contains("fulfillment-2 signs in to PostgreSQL as another service's login"),
            "\(sharedLogin.output)")
        let oneInstance = try await Self.check(file: "compose.postgres.yaml") {
            $0.replacingOccurrences(
                of: "fulfillment:${IAP_FULFILLMENT_PORT},fulfillment-2:${IAP_FULFILLMENT_PORT}", with: "fulfillment:${IAP_FULFILLMENT_PORT}")
        }
        #expect(oneInstance.status == 1 && oneInstance.output.contains("edge reaches fulfillment"), "\(oneInstance.output)")
    }
}
