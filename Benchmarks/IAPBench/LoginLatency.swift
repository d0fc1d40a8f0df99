import ArgumentParser
import Foundation
import IAPProtocol
import JSONRPC
import NIOCore
import RPCTransport

/// Concurrent logins against a running accounts service: logins/s and latency percentiles.
struct LoginLatency: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "logins",
        abstract: "Measure accounts.login throughput and latency at a fixed concurrency.")

    @Option(help: "accounts-service address.") var accounts = "127.0.0.1:7101"
    @Option(help: "Logins in flight at once.") var concurrency = 10
    @Option(help: "Total logins to time (after 2 x concurrency warm-up logins).") var count = 200

    func run() async throws {
        let client = try RPCClient(address: accounts, configuration: .init(connections: 2, callTimeout: .seconds(60)))
        // One account per worker: sign-in attempts are counted before the hash, so more concurrent
        // attempts on one username than the throttle allows are refused even when correct.
        let run = UUID().uuidString.prefix(8)
        let password = "benchmark passphrase"
        var registered: [Credentials] = []
        for worker in 0..<concurrency {
            let username = "bench-\(run)-\(worker)"
            _ = try await client.call(AccountsRegister.self, .init(username: username, password: password))
            registered.append(Credentials(username: username, password: password, deviceName: "bench"))
        }
        let logins = registered
        func timed(_ worker: Int) async throws -> Double {
            let start = DispatchTime.now().uptimeNanoseconds
            _ = try await client.call(AccountsLogin.self, logins[worker])
            return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6
        }
        for i in 0..<(2 * concurrency) { _ = try await timed(i % concurrency) }
        let started = DispatchTime.now().uptimeNanoseconds
        let latencies = try await withThrowingTaskGroup(of: [Double].self) { group in
            let perWorker = count / concurrency
            for worker in 0..<concurrency {
                group.addTask {
                    var out: [Double] = []
                    for _ in 0..<perWorker { out.append(try await timed(worker)) }
                    return out
                }
            }
            var all: [Double] = []
            for try await part in group { all += part }
            return all.sorted()
        }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9
        func pct(_ p: Double) -> Double { latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))] }
        print(
            String(
                format: "logins=%d concurrency=%d logins_per_s=%.1f p50_ms=%.1f p90_ms=%.1f p99_ms=%.1f max_ms=%.1f",
                latencies.count, concurrency, Double(latencies.count) / seconds, pct(0.5), pct(0.9), pct(0.99), latencies.last ?? 0))
        await client.close()
    }
}
