import ArgumentParser
import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO
import PostgresSupport

/// What a round trip to PostgreSQL costs this side of the socket: the suite's pool (a pool thread per call that waits for
/// each answer, `PostgresPool`) against postgres-nio's own `PostgresClient` (async, no thread waiting), the same trivial
/// statements over the same number of connections, so that the server's share is alike and the difference is the client's.
struct PostgresRoundTripsBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pg-round-trips",
        abstract: "Calls/s and this process's CPU per statement: the suite's PostgreSQL pool against postgres-nio's PostgresClient.")
    @Option(help: "postgres://USER:PASSWORD@HOST:PORT/DATABASE (compose/up.sh: user iap, password in DATA_DIR/postgres-password, port 7432).")
    var databaseURL: String
    @Option(help: "pool (the suite's PostgresPool) or client (postgres-nio's PostgresClient).") var via = "pool"
    @Option(help: "Connections to the server.") var connections = 8
    @Option(help: "Calls in flight.") var inFlight = 32
    @Option(help: "Statements per call, one after another on one connection (a redeem's first attempt sends 2).") var statements = 2
    @Option(help: "Seconds to run (after one second of warm-up).") var duration = 5

    func validate() throws {
        guard ["pool", "client"].contains(via) else { throw ValidationError("--via must be pool or client") }
        guard connections > 0, inFlight > 0, statements > 0, duration > 0 else { throw ValidationError("counts must be positive") }
    }

    func run() async throws {
        let url = try PostgresURL(databaseURL)
        let logger = {
            var logger = Logger(label: "pg-round-trips")
            logger.logLevel = .warning
            return logger
        }()
        let query: PostgresQuery = "SELECT 1::int8 AS one"
        let call: @Sendable () async throws -> Void
        var stop: @Sendable () async -> Void = {}
        if via == "pool" {
            let pool = try PostgresPool(url: url, schema: "public", connections: connections, logger: logger)
            let n = statements
            call = {
                try await pool.withSession { session in
                    for _ in 0..<n { _ = try session.one(query) }
                }
            }
            stop = { pool.close() }
        } else {
            var configuration = PostgresClient.Configuration(
                host: url.host, port: url.port, username: url.username, password: url.password, database: url.database, tls: .disable)
            configuration.options.minimumConnections = connections
            configuration.options.maximumConnections = connections
            let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
            let running = Task { await client.run() }
            let n = statements
            call = {
                try await client.withConnection { connection in
                    for _ in 0..<n {
                        for try await _ in try await connection.query(query, logger: logger) {}
                    }
                }
            }
            stop = { running.cancel() }
        }
        let calls = NIOLockedValueBox(0)
        let deadline = ContinuousClock.now + .seconds(1 + duration)
        let timing = ContinuousClock.now + .seconds(1)
        let cpuAtStart = NIOLockedValueBox<Double?>(nil)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<inFlight {
                group.addTask {
                    while ContinuousClock.now < deadline {
                        try await call()
                        if ContinuousClock.now >= timing {
                            let counted = calls.withLockedValue {
                                $0 += 1; return $0
                            }
                            if counted == 1 { cpuAtStart.withLockedValue { $0 = Self.processCPUSeconds() } }
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let cpu = Self.processCPUSeconds() - (cpuAtStart.withLockedValue { $0 } ?? 0)
        let done = calls.withLockedValue { $0 }
        await stop()
        let perStatement = cpu / Double(max(1, done * statements)) * 1_000_000
        print("via \(via): \(connections) connections, \(inFlight) calls in flight, \(statements) statements per call, \(duration) s")
        print(String(format: "calls/s       %.1f", Double(done) / Double(duration)))
        print(String(format: "statements/s  %.1f", Double(done * statements) / Double(duration)))
        print(String(format: "this process  %.1f µs of CPU per statement (%.0f%% of a core)", perStatement, cpu / Double(duration) * 100))
    }

    /// User and system CPU of this process so far, in seconds.
    static func processCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(Int32(RUSAGE_SELF.rawValue), &usage)
        func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1_000_000 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }
}
