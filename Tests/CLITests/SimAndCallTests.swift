import AppStoreSimulator
import Foundation
import IAPProtocol
import JSONRPC
import Logging
import RPCTransport
import Testing

/// `iap sim ...` and `iap call` against a real simulator over TCP, run as the built binary.
@Suite struct SimAndCallTests {
    static func startSimulator() async throws -> RPCServer {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("cli-sim-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        var quiet = Logger(label: "cli-sim")
        quiet.logLevel = .critical
        let simulator = try AppStoreSimulator(directory: dir)
        let server = RPCServer(
            configuration: .init(serviceName: "appstore-sim"),
            router: simulator.router(endpoint: try VerifyReceiptEndpoint(simulator: simulator, sharedSecret: nil)),
            logger: quiet)
        try await server.start()
        return server
    }

    @Test func simSubcommandsDriveTheSimulator() async throws {
        let server = try await Self.startSimulator()
        defer { Task { await server.shutdown() } }
        let addr = "127.0.0.1:\(server.localPort!)"
        let bought = try await ReceiptInspectTests.iap(["sim", "buy", "coins.100", "--addr", addr, "--json"])
        #expect(bought.status == 0)
        let purchase = try JSONDecoder().decode(SimPurchase.Result.self, from: Data(bought.output.utf8))
        #expect(purchase.transactionId == "2000000001")
        let finished = try await ReceiptInspectTests.iap(["sim", "finish", purchase.transactionId, "--addr", addr])
        #expect(finished.status == 0)
        #expect(finished.output.contains("finished 2000000001"))
        // Another Apple ID may not finish it: the service refuses, exit code 1.
        let refused = try await ReceiptInspectTests.iap(["sim", "finish", purchase.transactionId, "--addr", addr, "--apple-id", "x@example.com"])
        #expect(refused.status == 1)
        #expect(refused.output.contains("error 1003"))
        let clock = try await ReceiptInspectTests.iap(["sim", "advance-clock", "--days", "1", "--addr", addr])
        #expect(clock.status == 0)
        #expect(clock.output.contains("0 renewal(s)"))
        #expect(try await ReceiptInspectTests.iap(["sim", "fault", "explode", "--addr", addr]).status == 64)
    }

    @Test func callReachesAnyMethodAndReportsUnreachableServices() async throws {
        let server = try await Self.startSimulator()
        let addr = "127.0.0.1:\(server.localPort!)"
        let ping = try await ReceiptInspectTests.iap(["call", addr, "rpc.ping"])
        #expect(ping.status == 0)
        #expect(ping.output.trimmingCharacters(in: .whitespacesAndNewlines) == "\"pong\"")
        let unknown = try await ReceiptInspectTests.iap(["call", addr, "no.such.method"])
        #expect(unknown.status == 1)
        #expect(try await ReceiptInspectTests.iap(["call", addr, "rpc.ping", "[1]"]).status == 64)
        await server.shutdown()
        // Not the port just freed: a server of a test running alongside may be given it. Port 1 is never ours.
        let gone = try await ReceiptInspectTests.iap(["call", "127.0.0.1:1", "rpc.ping"])
        #expect(gone.status == 2)
        #expect(gone.output.contains("compose/up.sh"))
    }
}
