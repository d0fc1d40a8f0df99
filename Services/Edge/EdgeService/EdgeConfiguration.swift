import Foundation
import NIOCore
import Prometheus
import ServiceSupport

public struct EdgeConfiguration: Sendable {
    /// Largest request body accepted (a receipt is at most ~1 MiB as base64).
    public var maxBodyBytes = 2 * 1024 * 1024
    /// Per client address: a burst of this many requests, refilled at `requestsPerSecond`. Each member
    /// of a batch counts as a request (a 64-member batch fits a full bucket).
    public var burst: Double = 100
    public var requestsPerSecond: Double = 20
    /// Apple's webhook, per client address: its own bucket (Apple sends bursts from few addresses; each
    /// delivery costs a signature verification, so a flood of forgeries is bounded too). Over it: 429 with
    /// `Retry-After`, and Apple delivers again later.
    public var webhookBurst: Double = 1_000
    public var webhookRequestsPerSecond: Double = 200
    /// Apple's Get Retention Message requests, per client address: a bucket of their own, so a flood of them (Apple's
    /// performance test, or replayed Sandbox requests) cannot push notifications into 429.
    public var retentionBurst: Double = 1_000
    public var retentionRequestsPerSecond: Double = 200
    /// How long a Get Retention Message answer may take here (Apple's performance test expects about 700 ms); fulfillment
    /// is given 100 ms less, and records nothing it could not answer in that time.
    public var retentionDeadline: TimeAmount = .milliseconds(700)
    /// Largest webhook body (a signed notification is a few KiB; verification refuses over 64 KiB anyway).
    public var maxWebhookBodyBytes = 256 * 1024
    /// Answer Apple once fulfillment has RECORDED the notification (processed right after, off the answer's
    /// path); false: once it has also processed it (slower; the answer then waits for the App Store Server API).
    public var webhookAnswersOnceRecorded = true
    /// Addresses of reverse proxies whose `X-Forwarded-For` is believed; from anyone else it is ignored.
    public var trustedProxies: Set<String> = []
    /// Deadline for each forwarded call.
    public var callTimeout: TimeAmount = .seconds(10)
    /// The suite's internal token: with it, sign-ins and registrations carry the app's address, so
    /// accounts' limits key on each app's address instead of the edge's. Without it they key on the edge's.
    public var internalToken: String?
    /// Content downloads (`GET /v1/content/...`): the directory fulfillment serves and the key its signed
    /// URLs carry. Without both the route answers 404.
    public var contentDirectory: URL?
    public var contentSigner: ContentURLSigner?
    /// Size of each read of a content file (and of each write to the connection) when the file cannot go by
    /// `sendfile`: over TLS, or with `contentSendfile` off.
    public var contentChunkBytes = 256 * 1024
    /// Over plain HTTP/1.1, content bodies go from the file to the socket by `sendfile(2)` (no copy through the
    /// edge). Off: read in `contentChunkBytes` buffers, as over TLS (for file systems without `sendfile`).
    public var contentSendfile = true
    /// The clock content URLs expire by.
    public var clock: ServiceClock = .system
    /// An HTTP/1.1 connection's next request, head and body, must arrive within this (slow headers or bodies, idle keep-alive).
    public var requestTimeout: TimeAmount = .seconds(30)
    /// A connection whose pending writes make no progress for this long is closed (a client that stopped reading).
    public var stalledWriteTimeout: TimeAmount = .seconds(60)
    /// An HTTP/2 connection with no open stream is closed after this.
    public var idleTimeout: Duration = .seconds(60)
    /// Open connections per client address (the peer's; a trusted proxy's are not counted); past it a new
    /// connection is closed at once.
    public var maxConnectionsPerAddress = 512
    /// Largest request header block (all fields) and field count; past them the request is refused.
    public var maxHeaderBytes = 32 * 1024
    public var maxHeaderFields = 100
    /// Where the edge's HTTP metrics go and what `GET /metrics` shows (nil: a registry of its own).
    public var metricsRegistry: PrometheusCollectorRegistry?

    public init() {}
}
