import Foundation
import GRDB
import Hummingbird
import IAPProtocol
import NIOConcurrencyHelpers

/// Configure / Get / Delete Realtime URL and Apple's performance test of the app's Get Retention Message endpoint, as
/// Apple documents them: the URL is https (the simulator also takes http to a loopback host, for tests) of at most 256
/// characters, and in Production only once a performance test passed; the test runs in the Sandbox only, against the
/// Sandbox URL, with a subscription's original transaction from the Sandbox.
extension AppStoreServerAPIEndpoint {
    /// The simulator's test: Apple does not publish its own figures beyond the response time (about 700 ms; the
    /// simulator's `performanceThresholdMs`).
    var performanceConfig: [String: Int] {
        [
            "maxConcurrentRequests": 10, "totalRequests": 50, "totalDuration": 30_000,
            "responseTimeThreshold": simulator.performanceThresholdMs, "successRateThreshold": 95,
        ]
    }

    func addRealtimeRoutes(to router: Router<BasicRequestContext>, base: String, environment: SimEnvironment) {
        router.put(RouterPath("\(base)/realtime/url")) { request, _ -> Response in
            await self.respond(request) { bid, body in
                try self.configureRealtimeURL(body: body, environment: environment, bid: bid)
                return nil
            }
        }
        router.get(RouterPath("\(base)/realtime/url")) { request, _ -> Response in
            await self.respond(request) { _ in ["realtimeURL": try self.realtimeURL(environment: environment, delete: false)] }
        }
        router.delete(RouterPath("\(base)/realtime/url")) { request, _ -> Response in
            await self.respond(request) { _, _ in
                _ = try self.realtimeURL(environment: environment, delete: true)
                return nil
            }
        }
        router.post(RouterPath("\(base)/performanceTest")) { request, _ -> Response in
            await self.respond(request) { bid, body in try self.startPerformanceTest(body: body, environment: environment, bid: bid) }
        }
        router.get(RouterPath("\(base)/performanceTest/result/:requestId")) { request, context -> Response in
            await self.respond(request) { bid in try self.performanceTestResult(context.parameters.get("requestId") ?? "", bid: bid) }
        }
    }

    static let badRealtimeURL = APIError.badRequest(4_000_215, "Invalid realtime URL.")

    func configureRealtimeURL(body: [UInt8], environment: SimEnvironment, bid: String) throws {
        guard let url = try Self.object(body)["realtimeURL"] as? String, AppStoreSimulator.acceptsRealtimeURL(url) else {
            throw Self.badRealtimeURL
        }
        try simulator.store.writer.write { db in
            if environment == .production {
                let passed =
                    try Bool.fetchOne(
                        db, sql: "SELECT 1 FROM simPerformanceTest WHERE bundleId = ? AND result = 'PASS' LIMIT 1", arguments: [bid]) ?? false
                guard passed else {
                    throw APIError(status: .forbidden, code: 4_030_026, message: "A passing performance test is required first.")
                }
            }
            try AppStoreSimulator.setRealtimeURL(url, environment: environment, db: db)
        }
    }

    func realtimeURL(environment: SimEnvironment, delete: Bool) throws -> String {
        try simulator.store.writer.write { db in
            guard let url = try String.fetchOne(db, sql: "SELECT url FROM simRealtimeURL WHERE environment = ?", arguments: [environment.rawValue])
            else { throw APIError(status: .notFound, code: 4_040_021, message: "Realtime URL not found.") }
            if delete { try AppStoreSimulator.setRealtimeURL(nil, environment: environment, db: db) }
            return url
        }
    }

    func startPerformanceTest(body: [UInt8], environment: SimEnvironment, bid: String) throws -> [String: Any] {
        let invalid = APIError.badRequest(4_000_211, "Invalid performance test request.")
        guard environment == .sandbox, let original = try Self.object(body)["originalTransactionId"] as? String else { throw invalid }
        let requestId = UUID().uuidString.lowercased()
        let simulator = self.simulator
        let (transaction, url) = try simulator.store.writer.write { db -> (SimTransaction, String) in
            guard let t = try SimulatorStore.transaction(original, db: db), t.environment == .sandbox, t.bundleId == bid,
                t.productType == .autoRenewable, t.originalTransactionId == original
            else { throw invalid }
            guard let url = try String.fetchOne(db, sql: "SELECT url FROM simRealtimeURL WHERE environment = 'sandbox'") else {
                throw APIError(status: .notFound, code: 4_040_021, message: "Realtime URL not found.")
            }
            let running =
                try Bool.fetchOne(
                    db, sql: "SELECT 1 FROM simPerformanceTest WHERE bundleId = ? AND result = 'PENDING' LIMIT 1", arguments: [bid]) ?? false
            guard !running else { throw APIError.badRequest(4_000_213, "A performance test is already running.") }
            try db.execute(
                sql: "INSERT INTO simPerformanceTest (requestId, bundleId, target, result, createdAtMs) VALUES (?, ?, ?, 'PENDING', ?)",
                arguments: [requestId, bid, url, try simulator.now(db)])
            return (t, url)
        }
        let config = performanceConfig
        Task { await Self.runPerformanceTest(requestId, config: config, transaction: transaction, url: url, simulator: simulator) }
        return ["config": performanceConfig, "requestId": requestId]
    }

    /// Sends `totalRequests` realtime requests, `maxConcurrentRequests` at a time, and records the outcome: an attempt
    /// succeeds when the endpoint answered 2xx within `responseTimeThreshold`; PASS at `successRateThreshold` percent.
    static func runPerformanceTest(
        _ requestId: String, config: [String: Int], transaction: SimTransaction, url: String, simulator: AppStoreSimulator
    ) async {
        let total = config["totalRequests"]!, concurrency = config["maxConcurrentRequests"]!, threshold = config["responseTimeThreshold"]!
        var attempts: [(ms: Int, result: String)] = []
        await withTaskGroup(of: (Int, String).self) { group in
            var started = 0
            func next() {
                guard started < total else { return }
                started += 1
                group.addTask {
                    guard let a = try? await simulator.sendRealtimeRequest(transaction, locale: "en-US", url: url) else { return (0, "OTHER") }
                    return (a.latencyMs, a.sendAttemptResult == "SUCCESS" && a.latencyMs > threshold ? "TIMED_OUT" : a.sendAttemptResult)
                }
            }
            for _ in 0..<concurrency { next() }
            for await attempt in group {
                attempts.append(attempt)
                next()
            }
        }
        let times = attempts.map(\.ms).sorted()
        func percentile(_ p: Int) -> Int { times.isEmpty ? 0 : times[min(times.count - 1, (times.count * p + 99) / 100 - 1)] }
        let succeeded = attempts.filter { $0.result == "SUCCESS" }.count
        let rate = attempts.isEmpty ? 0 : succeeded * 100 / attempts.count
        var failures: [String: Int] = [:]
        for attempt in attempts where attempt.result != "SUCCESS" { failures[attempt.result, default: 0] += 1 }
        let answer: [String: Any] = [
            "config": config, "target": url, "result": rate >= config["successRateThreshold"]! ? "PASS" : "FAIL", "successRate": rate,
            "numPending": 0, "failures": failures,
            "responseTimes": [
                "average": times.isEmpty ? 0 : times.reduce(0, +) / times.count, "p50": percentile(50), "p90": percentile(90),
                "p95": percentile(95), "p99": percentile(99),
            ],
        ]
        let result = answer["result"] as? String ?? "FAIL"
        let json = (try? JSONSerialization.data(withJSONObject: answer, options: [.sortedKeys])).map { String(decoding: $0, as: UTF8.self) }
        _ = try? await simulator.blocking {
            try simulator.store.writer.write { db in
                try db.execute(
                    sql: "UPDATE simPerformanceTest SET result = ?, answer = ? WHERE requestId = ?",
                    arguments: [result, json, requestId])
            }
        }
    }

    func performanceTestResult(_ requestId: String, bid: String) throws -> [String: Any] {
        guard requestId.utf8.count == 36, UUID(uuidString: requestId) != nil else { throw APIError.badRequest(4_000_212, "Invalid request id.") }
        let row = try simulator.store.writer.read { db in
            try Row.fetchOne(
                db, sql: "SELECT * FROM simPerformanceTest WHERE requestId = ? AND bundleId = ?", arguments: [requestId.lowercased(), bid])
        }
        guard let row else { throw APIError(status: .notFound, code: 4_040_018, message: "Performance test run not found.") }
        if let answer: String = row["answer"], let object = try? JSONSerialization.jsonObject(with: Data(answer.utf8)) as? [String: Any] {
            return object
        }
        return [
            "config": performanceConfig, "target": row["target"] as String, "result": "PENDING",
            "numPending": performanceConfig["totalRequests"]!,
        ]
    }
}
