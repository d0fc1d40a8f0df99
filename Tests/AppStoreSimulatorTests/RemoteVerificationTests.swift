import AppStoreSimulator
import Foundation
import Hummingbird
import IAPProtocol
import JSONRPC
import Logging
import NIOConcurrencyHelpers
import RPCTestSupport
import RPCTransport
import ServiceSupport
import Testing
import VerificationService

/// The simulator's HTTP verifyReceipt endpoints on a real port, and a verification service calling
/// them in remote/auto mode.
final class RemoteFixture: Sendable {
    let simulator: AppStoreSimulator
    let endpoint: VerifyReceiptEndpoint
    let httpPort: Int
    private let app: Task<Void, any Error>

    static func start(sharedSecret: String? = nil) async throws -> RemoteFixture {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sim-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let simulator = try AppStoreSimulator(directory: dir)
        let endpoint = try VerifyReceiptEndpoint(simulator: simulator, sharedSecret: sharedSecret)
        var quiet = Logger(label: "sim-http")
        quiet.logLevel = .critical
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let application = endpoint.application(host: "127.0.0.1", port: 0, logger: quiet) { port in continuation.yield(port) }
        let task = Task { try await application.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else { throw CancellationError() }
        return RemoteFixture(simulator: simulator, endpoint: endpoint, httpPort: port, app: task)
    }

    private init(simulator: AppStoreSimulator, endpoint: VerifyReceiptEndpoint, httpPort: Int, app: Task<Void, any Error>) {
        self.simulator = simulator
        self.endpoint = endpoint
        self.httpPort = httpPort
        self.app = app
    }

    func stop() { app.cancel() }

    /// The default time limits are generous: these tests check outcomes (retries, statuses), and a
    /// starved machine (CI, a sanitizer build) must not turn a retry into a deadline.
    func verification(
        secret: String? = nil, startWithSandbox: Bool = false, attemptMs: Int64 = 10_000, deadlineMs: Int64 = 30_000,
        logger: Logger = Logger(label: "verification-remote")
    ) -> VerificationService {
        var remote = RemoteVerification(
            productionURL: "http://127.0.0.1:\(httpPort)/verifyReceipt",
            sandboxURL: "http://127.0.0.1:\(httpPort)/sandbox/verifyReceipt", sharedSecret: secret)
        remote.startWithSandbox = startWithSandbox
        remote.attemptTimeoutMs = attemptMs
        remote.deadlineMs = deadlineMs
        remote.backoffBaseMs = 20
        var config = VerificationConfiguration()
        config.bundleIds = ["com.example.game"]
        config.remote = remote
        return VerificationService(configuration: config, logger: logger)
    }

    func receipt(_ environment: SimEnvironment = .sandbox) throws -> String {
        try simulator.purchase(
            .init(
                appleId: "remote@example.com", bundleId: "com.example.game", productId: "coins.100",
                productType: .consumable, environment: environment)
        ).receiptData
    }
}

@Suite struct RemoteVerificationTests {
    @Test func aSandboxReceiptSentToProductionIsResentToTheSandbox() async throws {
        let f = try await RemoteFixture.start()
        defer { f.stop() }
        let answer = try await f.verification().verifyReceipt(.init(receiptData: try f.receipt(.sandbox), mode: .remote))
        #expect(answer.status == 0)
        #expect(answer.environment == "Sandbox")
        #expect(answer.receipt?.inApp.first?.productId == "coins.100")
    }

    @Test func aProductionReceiptSentToTheSandboxIsResentToProduction() async throws {
        let f = try await RemoteFixture.start()
        defer { f.stop() }
        let answer = try await f.verification(startWithSandbox: true).verifyReceipt(.init(receiptData: try f.receipt(.production), mode: .remote))
        #expect(answer.status == 0)
        #expect(answer.environment == "Production")
    }

    @Test func retryableStatusesAndServerErrorsAreRetried() async throws {
        let f = try await RemoteFixture.start()
        defer { f.stop() }
        let receipt = try f.receipt()
        try f.endpoint.setFault(.init(mode: .status21005, count: 2))
        #expect(try await f.verification().verifyReceipt(.init(receiptData: receipt, mode: .remote)).status == 0)
        try f.endpoint.setFault(.init(mode: .http503, count: 2))
        #expect(try await f.verification().verifyReceipt(.init(receiptData: receipt, mode: .remote)).status == 0)
        // Unending 21005: retryable unavailable, not an invalid receipt.
        try f.endpoint.setFault(.init(mode: .status21005))
        do {
            _ = try await f.verification().verifyReceipt(.init(receiptData: receipt, mode: .remote))
            Issue.record("expected unavailable")
        } catch {
            #expect(error.knownCode == .unavailable)
            #expect(error.retryable)
        }
    }

    @Test func aSlowEndpointIsReportedAsRetryableUnavailable() async throws {
        let f = try await RemoteFixture.start()
        defer { f.stop() }
        let receipt = try f.receipt()
        try f.endpoint.setFault(.init(mode: .slow, delayMs: 3_000))
        do {
            _ = try await f.verification(attemptMs: 200, deadlineMs: 900).verifyReceipt(.init(receiptData: receipt, mode: .remote))
            Issue.record("expected unavailable")
        } catch {
            #expect(error.knownCode == .unavailable)
            #expect(error.reason == "remoteUnavailable")
            #expect(error.retryable)
        }
    }

    @Test func aSharedSecretMismatchIs21004AndTheSecretIsNeverLogged() async throws {
        let f = try await RemoteFixture.start(sharedSecret: "correct-app-secret")
        defer { f.stop() }
        let receipt = try f.receipt()
        let logs = LogCapture()
        let logger = logs.logger(label: "remote")
        let wrong = try await f.verification(secret: "wrong-app-secret", logger: logger).verifyReceipt(.init(receiptData: receipt, mode: .remote))
        #expect(wrong.status == 21004)
        #expect(wrong.reason == "sharedSecretMismatch")
        #expect(try await f.verification(secret: "correct-app-secret").verifyReceipt(.init(receiptData: receipt, mode: .remote)).status == 0)
        // Failures with retries log; the secret never appears.
        try f.endpoint.setFault(.init(mode: .http503, count: 2))
        _ = try await f.verification(secret: "wrong-app-secret", logger: logger).verifyReceipt(.init(receiptData: receipt, mode: .remote))
        #expect(!logs.all.isEmpty)
        #expect(logs.all.allSatisfy { !$0.contains("app-secret") })
    }

    @Test func autoModeAsksTheEndpointOnlyWhenLocalCannotDecide() async throws {
        let f = try await RemoteFixture.start()
        defer { f.stop() }
        let service = f.verification()  // trusts only Apple's roots locally
        let receipt = try f.receipt()
        #expect(try await service.verifyReceipt(.init(receiptData: receipt, mode: .local)).reason == "untrustedChain")
        #expect(try await service.verifyReceipt(.init(receiptData: receipt, mode: .auto)).status == 0)
        // Malformed is decided locally, without asking.
        try f.endpoint.setFault(.init(mode: .http503))
        #expect(try await service.verifyReceipt(.init(receiptData: "garbage", mode: .auto)).reason == "malformed")
    }
}
