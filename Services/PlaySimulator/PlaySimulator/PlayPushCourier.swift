import AsyncHTTPClient
import Foundation
import GRDB
import IAPProtocol
import JSONRPC
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle
import ServiceSupport

/// Pushes real-time developer notifications as a Pub/Sub push subscription does: one POST per message, the body
/// `{message: {data (base64 DeveloperNotification), messageId, message_id, publishTime, publish_time, attributes},
/// subscription}`, `Authorization: Bearer` an OIDC token the simulator's push key signs. 102, 200, 201, 202 and 204
/// acknowledge; anything else, a timeout (10 s, Pub/Sub's default ack deadline) or no answer is retried with
/// exponential backoff (1 s doubling to 10 minutes) until acknowledged. Passes run one at a time.
public final class PlayPushCourier: Sendable {
    private let store: PlayStore
    private let accounts: PlayAccounts
    private let clock: ServiceClock
    private let passes = SerialPasses<PlayDeliverNotifications.Result>()
    private let fault = NIOLockedValueBox(PlaySetPushFault.Params())
    private let http: HTTPClient
    static let subscription = "projects/\(PlayAccounts.projectId)/subscriptions/play-rtdn"

    /// `trustRootsPEM`: certificates trusted besides the system's for HTTPS pushes (a development edge's self-signed one).
    init(store: PlayStore, accounts: PlayAccounts, clock: ServiceClock, trustRootsPEM: String? = nil) throws {
        self.store = store
        self.accounts = accounts
        self.clock = clock
        var config = HTTPClient.Configuration()
        if let trustRootsPEM {
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMBytes(Array(trustRootsPEM.utf8)))]
            config.tlsConfiguration = tls
        }
        config.redirectConfiguration = .disallow
        http = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: config)
    }

    public func shutdown() async { try? await http.shutdown() }

    public func setEndpoint(_ p: PlaySetPushEndpoint.Params) throws {
        if let url = p.url {
            guard let parsed = URL(string: url), ["http", "https"].contains(parsed.scheme ?? ""), parsed.host != nil else {
                throw RPCError.invalidParams("url must be an http(s) URL", field: "url", reason: "invalidValue")
            }
        }
        try store.writer.write { db in
            try db.execute(
                sql: "UPDATE playState SET pushURL = ?, pushAudience = ?, pushEmail = ?", arguments: [p.url, p.audience, p.serviceAccountEmail])
        }
        kick()
    }

    func setFault(_ p: PlaySetPushFault.Params) throws {
        for (name, value, range) in [
            ("dropPercent", p.dropPercent, 0...100), ("duplicatePercent", p.duplicatePercent, 0...100), ("delayMs", p.delayMs, 0...10_000),
        ] {
            if let value, !range.contains(value) {
                throw RPCError.invalidParams("\(name) must be \(range.lowerBound)-\(range.upperBound)", field: name, reason: "invalidValue")
            }
        }
        fault.withLockedValue { $0 = p }
    }

    /// Starts a pass in the background (after each event: Play publishes within moments).
    func kick() { Task { _ = await self.deliver() } }

    /// Pushes everything due now; answers once every push has its answer (after any pass already running).
    public func deliver() async -> PlayDeliverNotifications.Result { await passes.run { await self.pass() } }

    private struct Due {
        var seq: Int64
        var messageId: String
        var data: String
        var publishTimeMs: Int64
        var attempts: Int
    }

    private func pass() async -> PlayDeliverNotifications.Result {
        let read = try? await NIOThreadPool.singleton.runIfActive {
            try self.store.writer.read { db -> (String?, String?, String?, [Due]) in
                let state = try Row.fetchOne(db, sql: "SELECT pushURL, pushAudience, pushEmail, clockOffsetMs FROM playState")!
                let now = self.clock.nowMs + (state["clockOffsetMs"] as Int64)
                let due = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT seq, messageId, data, publishTimeMs, attempts FROM playNotification
                        WHERE deliveredAtMs IS NULL AND nextAttemptAtMs <= ? ORDER BY seq LIMIT 1000
                        """, arguments: [now]
                ).map {
                    Due(seq: $0["seq"], messageId: $0["messageId"], data: $0["data"], publishTimeMs: $0["publishTimeMs"], attempts: $0["attempts"])
                }
                return (state["pushURL"], state["pushAudience"], state["pushEmail"], due)
            }
        }
        guard let (url, audience, email, due) = read, let url else { return .init(attempted: 0, delivered: 0, pending: await pending()) }
        let fault = self.fault.withLockedValue { $0 }
        var rng = SystemRandomNumberGenerator()
        func chance(_ percent: Int?) -> Bool { Int(rng.next() % 100) < (percent ?? 0) }
        var attempted = 0
        var delivered = 0
        for message in fault.reorder == true ? due.shuffled() : due {
            if Task.isCancelled { break }
            if let delay = fault.delayMs, delay > 0 { try? await Task.sleep(for: .milliseconds(delay)) }
            let ok = chance(fault.dropPercent) ? false : await push(message, to: url, audience: audience ?? url, email: email)
            if ok, chance(fault.duplicatePercent) { _ = await push(message, to: url, audience: audience ?? url, email: email) }
            attempted += 1
            if ok { delivered += 1 }
            _ = try? await NIOThreadPool.singleton.runIfActive {
                try self.store.writer.write { db in
                    let now = self.clock.nowMs + (try Int64.fetchOne(db, sql: "SELECT clockOffsetMs FROM playState")!)
                    let backoff = min(Int64(1_000) << min(Int64(message.attempts), 20), 600_000)
                    try db.execute(
                        sql: """
                            UPDATE playNotification SET attempts = attempts + 1, deliveredAtMs = ?, nextAttemptAtMs = ? WHERE seq = ?
                            """, arguments: [ok ? now : nil, ok ? nil : now + backoff, message.seq])
                }
            }
        }
        return .init(attempted: attempted, delivered: delivered, pending: await pending())
    }

    private func pending() async -> Int {
        (try? await NIOThreadPool.singleton.runIfActive {
            try self.store.writer.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM playNotification WHERE deliveredAtMs IS NULL") ?? 0 }
        }) ?? 0
    }

    private func push(_ m: Due, to url: String, audience: String, email: String?) async -> Bool {
        let publish = PlayTime.rfc3339(m.publishTimeMs)
        let body: [String: Any] = [
            "message": [
                "data": Data(m.data.utf8).base64EncodedString(), "messageId": m.messageId, "message_id": m.messageId,
                "publishTime": publish, "publish_time": publish, "attributes": [String: String](),
            ] as [String: Any],
            "subscription": Self.subscription,
        ]
        do {
            var request = HTTPClientRequest(url: url)
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.headers.add(
                name: "Authorization", value: "Bearer \(try accounts.pushToken(audience: audience, email: email, nowSeconds: clock.nowMs / 1000))")
            request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: body, options: .withoutEscapingSlashes)))
            let response = try await http.execute(request, timeout: .seconds(10))
            _ = try? await response.body.collect(upTo: 1 << 20)
            return [102, 200, 201, 202, 204].contains(Int(response.status.code))
        } catch {
            return false
        }
    }
}

/// Runs the clock's due work and the courier every second until graceful shutdown: a renewal, a three-day refund or
/// a retry falls due without anyone asking.
public struct PlaySimulatorLoop: Service {
    let simulator: PlaySimulator

    public init(simulator: PlaySimulator) { self.simulator = simulator }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                _ = try? await NIOThreadPool.singleton.runIfActive { try self.simulator.write { _, _ in () } }
                _ = await self.simulator.courier.deliver()
                try? await Task.sleep(for: .seconds(1))
            }
        }
        await simulator.courier.shutdown()
    }
}
