import AsyncHTTPClient
import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

#if canImport(Glibc)
    import Glibc
#endif

/// Which addresses a webhook may reach (pure): public unicast only, unless an operator allowed private ones for that
/// endpoint. Refused: loopback, private (RFC 1918, unique local), link-local, shared (100.64/10), unspecified,
/// multicast and reserved ranges, and IPv6 forms of IPv4 ones.
public enum WebhookAddressPolicy {
    /// Nil: not an IP address.
    public static func isPrivate(_ ip: String) -> Bool? {
        var v4 = in_addr(), v6 = in6_addr()
        if inet_pton(AF_INET, ip, &v4) == 1 {
            return isPrivate(v4: withUnsafeBytes(of: &v4.s_addr) { Array($0) })
        }
        if inet_pton(AF_INET6, ip, &v6) == 1 {
            return isPrivate(v6: withUnsafeBytes(of: &v6) { Array($0) })
        }
        return nil
    }

    static func isPrivate(v4 b: [UInt8]) -> Bool {
        switch (b[0], b[1]) {
        case (0, _), (10, _), (127, _): return true
        case (100, 64...127): return true  // shared address space (carrier NAT)
        case (169, 254): return true  // link-local (cloud metadata services live here)
        case (172, 16...31), (192, 168): return true
        case (192, 0) where b[2] == 0 || b[2] == 2: return true  // IETF assignments, TEST-NET-1
        case (198, 18...19): return true  // benchmarking
        case (198, 51) where b[2] == 100, (203, 0) where b[2] == 113: return true  // TEST-NET-2, -3
        default: return b[0] >= 224  // multicast, reserved, broadcast
        }
    }

    static func isPrivate(v6 b: [UInt8]) -> Bool {
        let v4 = Array(b[12..<16])
        if b[0..<8].allSatisfy({ $0 == 0 }) {
            if b[8..<10].allSatisfy({ $0 == 0 }) && b[10] == 0xff && b[11] == 0xff { return isPrivate(v4: v4) }  // IPv4-mapped
            if b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0 { return isPrivate(v4: v4) }  // IPv4-translated (SIIT)
            if b[8..<12].allSatisfy({ $0 == 0 }) { return true }  // ::, ::1, IPv4-compatible (deprecated)
        }
        if b[0..<12] == [0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0] { return isPrivate(v4: v4) }  // NAT64 well-known prefix
        if b[0..<6] == [0x00, 0x64, 0xff, 0x9b, 0x00, 0x01] { return true }  // NAT64 local use 64:ff9b:1::/48
        if b[0] == 0x20 && b[1] == 0x02 { return isPrivate(v4: Array(b[2..<6])) }  // 6to4 embeds an IPv4 address
        if b[0] & 0xfe == 0xfc { return true }  // unique local fc00::/7
        if b[0] == 0xfe && b[1] & 0xc0 == 0x80 { return true }  // link-local fe80::/10
        if b[0] == 0xfe && b[1] & 0xc0 == 0xc0 { return true }  // site-local fec0::/10 (deprecated)
        if b[0] == 0xff { return true }  // multicast
        if b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8 { return true }  // documentation
        return false
    }
}

/// A webhook's URL, checked: http or https, a host, no credentials.
public struct WebhookURL: Sendable, Equatable {
    public let host: String
    public let port: Int
    public let url: String

    public init?(_ text: String) {
        guard text.utf8.count <= 2_000, let c = URLComponents(string: text), let scheme = c.scheme?.lowercased(),
            scheme == "https" || scheme == "http", var host = c.host, !host.isEmpty, c.user == nil, c.password == nil, c.fragment == nil
        else { return nil }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        self.host = host
        self.port = c.port ?? (scheme == "https" ? 443 : 80)
        self.url = text
    }
}

/// Sends signed events to endpoints (Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature`, HMAC-SHA256
/// over `id.timestamp.body` with each `whsec_` secret). The host is resolved here, the address checked, and the
/// connection made to exactly that address (the client's DNS override), so a name that resolves to a private address
/// at delivery (DNS rebinding) is refused like one that did when it was added. Never follows redirects; 15 s per request.
public final class WebhookSender: Sendable {
    private struct Client {
        var address: String
        var resolvedAt: ContinuousClock.Instant
        var http: HTTPClient
    }

    private let clients = NIOLockedValueBox<[String: Client]>([:])
    /// Clients replaced (a name resolved elsewhere: a round-robin name, every `resolveEvery`) or forgotten (an endpoint
    /// deleted): requests may still be in flight on them, so each is shut down once a request started on it must have
    /// ended (`shutDownRetired`), or with the sender. Until 2026-11-30 they were kept until the sender stopped, one more
    /// for every new address: a slow leak in a service that runs for months.
    private let retired = NIOLockedValueBox<[(http: HTTPClient, since: ContinuousClock.Instant)]>([])
    /// Each request's deadline: connecting, sending and the answer.
    let timeout: TimeAmount
    /// How long a resolved address is used before the name is resolved again.
    let resolveEvery: Duration
    /// Connections open at once to one endpoint: the worker's requests in flight per endpoint (`WebhookPolicy.concurrency`).
    /// Fewer, and the client queues the rest behind the ones in flight, so accounts whose requests hang hold up every
    /// other account's events (AsyncHTTPClient's default is 8).
    let connectionsPerEndpoint: Int
    /// Resolves a host (`lookUp`; tests stand in a slow resolver).
    let resolver: @Sendable (WebhookURL) async throws -> SocketAddress

    public init(
        timeout: Duration = .seconds(15), resolveEvery: Duration = .seconds(60), connectionsPerEndpoint: Int = WebhookPolicy().concurrency,
        resolver: @escaping @Sendable (WebhookURL) async throws -> SocketAddress = WebhookSender.lookUp
    ) {
        self.timeout = .nanoseconds(timeout.components.seconds * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000)
        self.resolveEvery = resolveEvery
        self.connectionsPerEndpoint = max(1, connectionsPerEndpoint)
        self.resolver = resolver
    }

    /// The address `url` names now, refused when private and not allowed (`WebhookAddressPolicy`).
    public static func resolve(
        _ url: WebhookURL, allowPrivate: Bool, lookUp: @Sendable (WebhookURL) async throws -> SocketAddress = WebhookSender.lookUp
    ) async throws -> String {
        let address: String
        if WebhookAddressPolicy.isPrivate(url.host) != nil {
            address = url.host
        } else {
            guard let ip = try await lookUp(url).ipAddress else { throw WebhookSendError("\(url.host) did not resolve to an IP address") }
            address = ip
        }
        if !allowPrivate, WebhookAddressPolicy.isPrivate(address) ?? true {
            throw WebhookSendError("\(url.host) is a private, loopback or link-local address (\(address)); not allowed for this endpoint")
        }
        return address
    }

    /// `getaddrinfo` blocks: on a GCD thread, not the service's small blocking pool (a slow resolver must not hold up
    /// its other work), and given up after 15 s (the thread finishes on its own; its answer is dropped).
    @Sendable public static func lookUp(_ url: WebhookURL) async throws -> SocketAddress {
        let pending = NIOLockedValueBox<CheckedContinuation<SocketAddress, any Error>?>(nil)
        @Sendable func finish(_ result: Result<SocketAddress, any Error>) {
            pending.withLockedValue { c -> CheckedContinuation<SocketAddress, any Error>? in
                defer { c = nil }
                return c
            }?.resume(with: result)
        }
        return try await withCheckedThrowingContinuation { continuation in
            pending.withLockedValue { $0 = continuation }
            DispatchQueue.global().async { finish(Result { try SocketAddress.makeAddressResolvingHost(url.host, port: url.port) }) }
            DispatchQueue.global().asyncAfter(deadline: .now() + 15) {
                finish(.failure(WebhookSendError("\(url.host) did not resolve within 15 s")))
            }
        }
    }

    /// One POST of `body`; answers the HTTP status (2xx: delivered) or throws why none came.
    func send(_ w: WebhookRecord, eventId: String, body: [UInt8], secrets: [String]) async throws -> Int {
        guard let url = WebhookURL(w.url) else { throw WebhookSendError("the endpoint's URL is not a valid http(s) URL") }
        // One deadline for the whole exchange, from before the host is resolved (a resolver taking its 15 s must not give
        // the request 15 s more, past the round's lease) to the answer's body: the client's own bounds the wait for the
        // head only, and a receiver trickling a body could keep a request past its lease (its events then sent twice at
        // once).
        let deadline = NIODeadline.now() + timeout
        let http = try await client(w, url)
        guard NIODeadline.now() < deadline else { throw WebhookSendError("\(url.host) resolved after the request's time had passed") }
        let timestamp = String(Int64(Date().timeIntervalSince1970))
        var request = HTTPClientRequest(url: w.url)
        request.method = .POST
        request.headers.add(name: "content-type", value: "application/json")
        request.headers.add(name: "user-agent", value: "iap-server-webhooks")
        request.headers.add(name: "webhook-id", value: eventId)
        request.headers.add(name: "webhook-timestamp", value: timestamp)
        request.headers.add(name: "webhook-signature", value: Self.signatures(id: eventId, timestamp: timestamp, body: body, secrets: secrets))
        request.body = .bytes(ByteBuffer(bytes: body))
        let response = try await http.execute(request, deadline: deadline)
        if response.status == .noContent || response.headers.first(name: "content-length") == "0" {
            // Known empty (the usual answer): its end came with its head, so nothing is waited for, and the race below (a
            // timer and two tasks per delivery) is not needed.
            _ = try? await response.body.collect(upTo: 0)
        } else {
            await Self.drain(response.body, by: deadline)
        }
        return Int(response.status.code)
    }

    /// Reads (and drops) the answer's body, so the connection is reused, until `deadline` at most: the status decided the
    /// outcome already; a body that has not ended by then is cut off with its connection.
    static func drain(_ body: HTTPClientResponse.Body, by deadline: NIODeadline) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { _ = try? await body.collect(upTo: 64 << 10) }  // a longer one is cut off: the answer is not kept
            group.addTask { try? await Task.sleep(nanoseconds: UInt64(max(0, (deadline - .now()).nanoseconds))) }
            await group.next()
            group.cancelAll()
        }
    }

    /// `v1,<base64>` per secret, space-separated.
    public static func signatures(id: String, timestamp: String, body: [UInt8], secrets: [String]) -> String {
        secrets.compactMap { secret -> String? in
            guard let key = Self.key(secret) else { return nil }
            var message = Array("\(id).\(timestamp).".utf8)
            message += body
            return "v1," + Data(HMAC<SHA256>.authenticationCode(for: message, using: key)).base64EncodedString()
        }.joined(separator: " ")
    }

    /// A new secret: `whsec_` and 32 random bytes in base64.
    public static func newSecret() -> String {
        "whsec_" + Data(SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }).base64EncodedString()
    }

    static func key(_ secret: String) -> SymmetricKey? {
        guard secret.hasPrefix("whsec_"), let bytes = Data(base64Encoded: String(secret.dropFirst(6))), !bytes.isEmpty else { return nil }
        return SymmetricKey(data: bytes)
    }

    /// The endpoint's client, bound to the address its host resolves to now (resolved again after `resolveEvery`).
    private func client(_ w: WebhookRecord, _ url: WebhookURL) async throws -> HTTPClient {
        let now = ContinuousClock.now
        if let known = clients.withLockedValue({ $0[w.id] }), now - known.resolvedAt < resolveEvery { return known.http }
        let address = try await Self.resolve(url, allowPrivate: w.allowPrivateAddress, lookUp: resolver)
        var config = HTTPClient.Configuration(
            redirectConfiguration: .disallow, timeout: .init(connect: timeout, read: timeout),
            connectionPool: .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: connectionsPerEndpoint))
        config.dnsOverride = [url.host: address]
        config.tracing.tracer = nil  // no spans are kept; building them was 3.6% of a delivery's CPU
        // HTTP/1.1 only: over HTTP/2 every request would share one connection, and a server allowing fewer concurrent
        // streams than the worker's requests in flight would queue other accounts' events behind hanging ones.
        config.httpVersion = .http1Only
        return clients.withLockedValue { all -> HTTPClient in
            if let known = all[w.id], known.address == address {
                all[w.id]?.resolvedAt = now
                return known.http
            }
            let made = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: config)
            // Retired from now, not from before the lookup (which may have taken seconds while another request took this client).
            if let old = all[w.id]?.http { retired.withLockedValue { $0.append((old, .now)) } }
            all[w.id] = Client(address: address, resolvedAt: now, http: made)
            return made
        }
    }

    /// Forgets an endpoint's client (deleted); a delivery in flight on it finishes first.
    func forget(_ id: String) {
        if let old = clients.withLockedValue({ $0.removeValue(forKey: id) }) { retired.withLockedValue { $0.append((old.http, .now)) } }
    }

    /// Forgets the clients of endpoints not in `ids` (deleted, here or by another instance), and shuts down the retired
    /// clients no request can still be using. The worker calls it every round with the endpoints it read.
    func keep(only ids: Set<String>, now: ContinuousClock.Instant = .now) async {
        let gone = clients.withLockedValue { all in all.keys.filter { !ids.contains($0) } }
        for id in gone { forget(id) }
        await shutDownRetired(now: now)
    }

    /// Shuts down the clients retired before `now` by more than a request's time (and 5 s): every request started on one
    /// has ended by then (its deadline), answered or not.
    func shutDownRetired(now: ContinuousClock.Instant = .now) async {
        let grace = Duration.nanoseconds(timeout.nanoseconds) + .seconds(5)
        let due = retired.withLockedValue { r -> [HTTPClient] in
            let (old, young) = (r.filter { now - $0.since >= grace }, r.filter { now - $0.since < grace })
            r = young
            return old.map(\.http)
        }
        for client in due { try? await client.shutdown() }
    }

    /// Clients in use and retired but not shut down yet (tests).
    var clientCounts: (current: Int, retired: Int) {
        (clients.withLockedValue { $0.count }, retired.withLockedValue { $0.count })
    }

    public func shutdown() async {
        let current = clients.withLockedValue { all -> [HTTPClient] in
            defer { all = [:] }
            return all.values.map(\.http)
        }
        let old = retired.withLockedValue { r -> [HTTPClient] in
            defer { r = [] }
            return r.map(\.http)
        }
        for client in current + old { try? await client.shutdown() }
    }
}

public struct WebhookSendError: Error, Sendable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
