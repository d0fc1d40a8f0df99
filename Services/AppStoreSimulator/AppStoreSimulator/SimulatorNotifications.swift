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

/// One App Store Server Notification v2 the simulated App Store made, and how its delivery went.
struct SimNotification: Sendable {
    var notificationUUID: String
    var seq: Int64
    var bundleId: String
    var environment: SimEnvironment
    var notificationType: String
    var subtype: String?
    var transactionId: String?
    var originalTransactionId: String?
    var signedDateMs: Int64
    var signedPayload: String
    var attempts: Int
    var nextAttemptAtMs: Int64?

    static func row(_ r: Row) -> SimNotification {
        SimNotification(
            notificationUUID: r["notificationUUID"], seq: r["seq"], bundleId: r["bundleId"],
            environment: SimEnvironment(rawValue: r["environment"]) ?? .sandbox, notificationType: r["notificationType"],
            subtype: r["subtype"], transactionId: r["transactionId"], originalTransactionId: r["originalTransactionId"],
            signedDateMs: r["signedDateMs"], signedPayload: r["signedPayload"], attempts: r["attempts"],
            nextAttemptAtMs: r["nextAttemptAtMs"])
    }
}

/// One send attempt, as Get Notification History reports it (`attemptDate`, `sendAttemptResult`).
struct SimSendAttempt: Sendable {
    var attemptDateMs: Int64
    var result: String
}

/// Apple's delivery rules, on the simulated clock: a first attempt when the event happens; in production,
/// retries 1, 12, 24, 48 and 72 hours after the previous failed attempt; in sandbox, none.
enum NotificationRetrySchedule {
    static let retryHours: [Int64] = [1, 12, 24, 48, 72]

    /// When to try again after `attempts` failed attempts at `lastAttemptMs`, or nil (given up).
    static func next(after attempts: Int, lastAttemptMs: Int64, environment: SimEnvironment) -> Int64? {
        guard environment == .production, attempts >= 1, attempts <= retryHours.count else { return nil }
        return lastAttemptMs + retryHours[attempts - 1] * 3_600_000
    }
}

extension SimulatorStore {
    /// Records a notification; its first attempt is due now when the environment has a URL.
    static func insertNotification(_ n: SimNotification, db: Database) throws {
        // Their own sequence: transaction ids (from the transactions' sequence) stay consecutive.
        let seq = try Int64.fetchOne(db, sql: "SELECT COALESCE(MAX(seq), 0) + 1 FROM simNotification")!
        let hasURL =
            try Bool.fetchOne(
                db, sql: "SELECT 1 FROM simNotificationURL WHERE environment = ?", arguments: [n.environment.rawValue]) ?? false
        try db.execute(
            sql: """
                INSERT INTO simNotification (notificationUUID, seq, bundleId, environment, notificationType, subtype, transactionId,
                    originalTransactionId, signedDateMs, signedPayload, attempts, nextAttemptAtMs)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?)
                """,
            arguments: [
                n.notificationUUID, seq, n.bundleId, n.environment.rawValue, n.notificationType, n.subtype, n.transactionId,
                n.originalTransactionId, n.signedDateMs, n.signedPayload, hasURL ? n.signedDateMs : nil,
            ])
    }

    static func notification(_ uuid: String, db: Database) throws -> SimNotification? {
        try Row.fetchOne(db, sql: "SELECT * FROM simNotification WHERE notificationUUID = ?", arguments: [uuid]).map(SimNotification.row)
    }

    static func attempts(_ uuid: String, db: Database) throws -> [SimSendAttempt] {
        try Row.fetchAll(
            db, sql: "SELECT attemptDateMs, result FROM simSendAttempt WHERE notificationUUID = ? ORDER BY attempt", arguments: [uuid]
        ).map { SimSendAttempt(attemptDateMs: $0["attemptDateMs"], result: $0["result"]) }
    }

    /// Notifications due by `nowMs` in an environment that has a URL, oldest first, with that URL.
    static func dueNotifications(nowMs: Int64, limit: Int, db: Database) throws -> [(SimNotification, String)] {
        try Row.fetchAll(
            db,
            sql: """
                SELECT n.*, u.url AS url FROM simNotification n JOIN simNotificationURL u ON u.environment = n.environment
                WHERE n.nextAttemptAtMs IS NOT NULL AND n.nextAttemptAtMs <= ? ORDER BY n.nextAttemptAtMs, n.seq LIMIT ?
                """,
            arguments: [nowMs, limit]
        ).map { (SimNotification.row($0), $0["url"]) }
    }

    static func recordAttempt(_ n: SimNotification, atMs: Int64, result: String, db: Database) throws {
        let attempts = n.attempts + 1
        try db.execute(
            sql: "INSERT INTO simSendAttempt (notificationUUID, attempt, attemptDateMs, result) VALUES (?, ?, ?, ?)",
            arguments: [n.notificationUUID, attempts, atMs, result])
        let next = result == "SUCCESS" ? nil : NotificationRetrySchedule.next(after: attempts, lastAttemptMs: atMs, environment: n.environment)
        try db.execute(
            sql: "UPDATE simNotification SET attempts = ?, nextAttemptAtMs = ? WHERE notificationUUID = ?",
            arguments: [attempts, next, n.notificationUUID])
    }
}

/// Sends the simulator's notifications to the configured URLs (`sim.setNotificationURL`,
/// `--notification-url`): each due one is POSTed as Apple's body, the answer recorded as a send attempt
/// (Get Notification History shows them), and a failure retried on Apple's schedule as the simulated clock
/// passes it. Passes run one at a time, so a notification is never sent twice by overlapping passes.
public final class NotificationCourier: Sendable {
    public struct Configuration: Sendable {
        /// Each POST's deadline (an answer slower than this is TIMED_OUT).
        public var timeout: TimeAmount = .seconds(10)
        /// PEM roots to trust for https URLs besides the system's (a development edge's certificate).
        public var trustRootsPEM: String?
        public init() {}
    }

    private let store: SimulatorStore
    private let now: @Sendable (Database) throws -> Int64
    private let configuration: Configuration
    /// Trusts `--notification-ca` besides the system's roots; realtime retention requests go out through it too.
    let http: HTTPClient
    private let passes = SerialPasses<SimDeliverNotifications.Result>()
    private let fault = NIOLockedValueBox(SimSetNotificationFault.Params())
    /// Whether any environment has a URL: without one there is nothing to send, and events start no pass.
    private let hasURL = NIOLockedValueBox(false)

    func urlsChanged(any: Bool) { hasURL.withLockedValue { $0 = any } }

    /// `sim.setNotificationFault`: how deliveries misbehave from now on.
    public func setFault(_ p: SimSetNotificationFault.Params) throws {
        for (name, value, range) in [
            ("dropPercent", p.dropPercent, 0...100), ("duplicatePercent", p.duplicatePercent, 0...100), ("delayMs", p.delayMs, 0...10_000),
        ] {
            if let value, !range.contains(value) {
                throw RPCError.invalidParams("\(name) must be \(range.lowerBound)-\(range.upperBound)", field: name, reason: "invalidValue")
            }
        }
        fault.withLockedValue { $0 = p }
    }

    init(store: SimulatorStore, configuration: Configuration, now: @escaping @Sendable (Database) throws -> Int64) throws {
        self.store = store
        self.now = now
        self.configuration = configuration
        http = try configuration.trustRootsPEM.map(Self.client(trusting:)) ?? .shared
        let any = try store.writer.read { db in try Bool.fetchOne(db, sql: "SELECT 1 FROM simNotificationURL LIMIT 1") ?? false }
        hasURL.withLockedValue { $0 = any }
    }

    /// One client per set of extra roots, kept for the life of the process like `HTTPClient.shared`.
    private static let clients = NIOLockedValueBox<[String: HTTPClient]>([:])

    private static func client(trusting pem: String) throws -> HTTPClient {
        let roots = try NIOSSLCertificate.fromPEMBytes(Array(pem.utf8))
        return clients.withLockedValue { clients in
            if let existing = clients[pem] { return existing }
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.additionalTrustRoots = [.certificates(roots)]
            var config = HTTPClient.Configuration(tlsConfiguration: tls)
            config.redirectConfiguration = .disallow
            let made = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: config)
            clients[pem] = made
            return made
        }
    }

    /// Sends everything due now and answers when every answer is recorded (after any pass already running).
    /// A caller that is cancelled (shutdown) cancels the pass: no attempt is started after that.
    public func deliver() async -> SimDeliverNotifications.Result { await passes.run { await self.pass() } }

    /// Starts a pass in the background (after each event, as Apple sends without being asked).
    func kick() {
        guard hasURL.withLockedValue({ $0 }) else { return }
        Task { _ = await self.deliver() }
    }

    private func pass() async -> SimDeliverNotifications.Result {
        var attempted = 0
        var succeeded = 0
        // A retry that falls due while this pass runs waits for the next pass.
        let due =
            (try? await NIOThreadPool.singleton.runIfActive {
                try self.store.writer.read { db in try SimulatorStore.dueNotifications(nowMs: try self.now(db), limit: 1_000, db: db) }
            }) ?? []
        let fault = self.fault.withLockedValue { $0 }
        var rng = SystemRandomNumberGenerator()
        func chance(_ percent: Int?) -> Bool { Int(rng.next() % 100) < (percent ?? 0) }
        // A URL that did not answer at all is not tried again in this pass: its other notifications get the
        // same result at once (each still an attempt, retried on Apple's schedule), so a dead webhook costs
        // one timeout per pass, not one per notification.
        var unreachable: [String: String] = [:]
        for (notification, url) in fault.reorder == true ? due.shuffled() : due {
            if Task.isCancelled { break }
            if let delay = fault.delayMs, delay > 0 { try? await Task.sleep(for: .milliseconds(delay)) }
            // Dropped: Apple thinks it sent, nothing arrives, and the attempt counts as timed out.
            let result: String
            if let known = unreachable[url] {
                result = known
            } else if chance(fault.dropPercent) {
                result = "TIMED_OUT"
            } else {
                result = await send(notification.signedPayload, to: url)
                if ["NO_RESPONSE", "TIMED_OUT", "TLS_ISSUE"].contains(result) { unreachable[url] = result }
            }
            if result == "SUCCESS", chance(fault.duplicatePercent) { _ = await send(notification.signedPayload, to: url) }
            attempted += 1
            if result == "SUCCESS" { succeeded += 1 }
            _ = try? await NIOThreadPool.singleton.runIfActive {
                try self.store.writer.write { db in
                    try SimulatorStore.recordAttempt(notification, atMs: try self.now(db), result: result, db: db)
                }
            }
        }
        let pending =
            (try? await NIOThreadPool.singleton.runIfActive {
                try self.store.writer.read { db in
                    try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM simNotification WHERE nextAttemptAtMs IS NOT NULL AND attempts > 0") ?? 0
                }
            }) ?? 0
        return .init(attempted: attempted, succeeded: succeeded, pendingRetries: pending)
    }

    /// One POST of Apple's body; the answer as Apple's `sendAttemptResult`.
    private func send(_ signedPayload: String, to url: String) async -> String {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        let body = (try? JSONSerialization.data(withJSONObject: ["signedPayload": signedPayload])) ?? Data()
        request.body = .bytes(ByteBuffer(bytes: body))
        do {
            let response = try await http.execute(request, timeout: configuration.timeout)
            _ = try? await response.body.collect(upTo: 1 << 20)
            return (200...206).contains(Int(response.status.code)) ? "SUCCESS" : "UNSUCCESSFUL_HTTP_RESPONSE_CODE"
        } catch let error as HTTPClientError {
            switch error {
            case .deadlineExceeded, .readTimeout, .connectTimeout, .writeTimeout: return "TIMED_OUT"
            case .remoteConnectionClosed: return "PREMATURE_CLOSE"
            case .invalidURL, .emptyHost, .emptyScheme: return "OTHER"
            default: return "NO_RESPONSE"
            }
        } catch is NIOSSLError {
            return "TLS_ISSUE"
        } catch {
            return "\(error)".contains("SSL") ? "TLS_ISSUE" : "NO_RESPONSE"
        }
    }
}

/// Runs the courier every `interval` until graceful shutdown, so retries go out as the clock reaches them.
public struct NotificationCourierLoop: Service {
    let courier: NotificationCourier
    let interval: Duration

    public init(courier: NotificationCourier, interval: Duration = .seconds(5)) {
        self.courier = courier
        self.interval = interval
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                _ = await self.courier.deliver()
                try? await Task.sleep(for: self.interval)
            }
        }
    }
}
