import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import HummingbirdHTTP2
import IAPProtocol
import JSONRPC
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Prometheus
import RPCTransport
import ServiceSupport
import Synchronization

/// The one public door (docs/services/edge.md): JSON-RPC over HTTP for the public methods of accounts,
/// catalog and fulfillment, and Apple's notification webhook. Admin and internal methods do not exist
/// here; the internal services stay on their private addresses.
public final class EdgeService: Sendable {
    let clients: [String: RPCClient]
    let configuration: EdgeConfiguration
    private let limiter: TokenBuckets
    private let webhookLimiter: TokenBuckets
    let retentionLimiter: TokenBuckets
    let logger: Logger
    private let publicMethods = ContractMethods.publicAtTheEdge
    private let contentFiles: ContentFiles?
    let metricsRegistry: PrometheusCollectorRegistry
    let requestMetrics: HTTPServerRequestMetrics
    /// Open connections per client address, capped (`maxConnectionsPerAddress`).
    let connections: ConnectionsPerAddress
    private let readinessReports: Readiness
    /// Requests `EventLoopRoutes` answered (`/v1/rpc` and the webhook; the rest went through the router): for tests.
    package let answeredOnTheEventLoop = Atomic<Int>(0)
    private let fileIO = FileIO()

    public init(accounts: RPCClient, catalog: RPCClient, fulfillment: RPCClient, configuration: EdgeConfiguration, logger: Logger) {
        let clients = ["accounts": accounts, "catalog": catalog, "fulfillment": fulfillment]
        self.clients = clients
        self.readinessReports = Readiness { await EdgeService.ping(clients) }
        self.configuration = configuration
        self.limiter = TokenBuckets(burst: configuration.burst, perSecond: configuration.requestsPerSecond)
        self.webhookLimiter = TokenBuckets(burst: configuration.webhookBurst, perSecond: configuration.webhookRequestsPerSecond)
        self.retentionLimiter = TokenBuckets(burst: configuration.retentionBurst, perSecond: configuration.retentionRequestsPerSecond)
        self.logger = logger
        self.contentFiles = configuration.contentDirectory.map(ContentFiles.init(directory:))
        self.metricsRegistry = configuration.metricsRegistry ?? PrometheusCollectorRegistry()
        self.requestMetrics = HTTPServerRequestMetrics(factory: PrometheusMetrics.factory(registry: metricsRegistry))
        self.connections = ConnectionsPerAddress(
            cap: configuration.maxConnectionsPerAddress, exempt: configuration.trustedProxies,
            metrics: PrometheusMetrics.factory(registry: metricsRegistry))
    }

    public func close() async {
        for client in clients.values { await client.close() }
    }

    // MARK: POST /v1/rpc

    /// What `/v1/rpc` and the webhook answer over HTTP, whichever path took the request.
    struct HTTPAnswer: Sendable {
        var status: HTTPResponse.Status
        var headers: HTTPFields = [:]
        var body: [UInt8] = []

        var response: Response {
            Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
        }

        /// 429 with `Retry-After`: the whole seconds until the bucket has a token again (at least 1).
        static func tooManyRequests(wait: Double) -> HTTPAnswer {
            HTTPAnswer(status: .tooManyRequests, headers: [.retryAfter: String(max(1, Int(wait.rounded(.up))))])
        }
    }

    /// `/v1/rpc`'s checks before its body is read: the client address's bucket (429 with `Retry-After`) and the
    /// media type (415). Returns the client's address either way.
    func rpcAdmission(headers: HTTPFields, peer: String?) -> (address: String, refusal: HTTPAnswer?) {
        let address = clientAddress(peer: peer, forwardedFor: headers[.xForwardedFor])
        if let wait = limiter.take(address) {
            return (address, .tooManyRequests(wait: wait))
        }
        guard (headers[.contentType] ?? "").lowercased().hasPrefix("application/json") else {
            return (address, HTTPAnswer(status: .unsupportedMediaType))
        }
        return (address, nil)
    }

    /// The answer to an admitted `/v1/rpc` request whose body (at most `maxBodyBytes`) has arrived: the bearer
    /// token as the session, a batch's extra members charged to the bucket. Never fails; completes on `eventLoop`.
    func rpcAnswer(headers: HTTPFields, address: String, body: [UInt8], on eventLoop: any EventLoop) -> EventLoopFuture<HTTPAnswer> {
        var bearer: String?
        if let authorization = headers[.authorization], authorization.lowercased().hasPrefix("bearer ") {
            bearer = String(authorization.dropFirst(7)).trimmingCharacters(in: .whitespaces)
        }
        var batchWait: Double?
        let answer = rpc(
            body: body, bearer: bearer, clientAddress: address,
            charge: { extra in
                guard extra > 0 else { return true }
                batchWait = self.limiter.take(address, cost: Double(extra))
                return batchWait == nil
            }, on: eventLoop)
        let wait = batchWait
        return answer.map { status, body in
            if status == .tooManyRequests {
                return .tooManyRequests(wait: wait ?? 1)
            }
            return HTTPAnswer(status: status, headers: status == .noContent ? [:] : [.contentType: "application/json"], body: body)
        }
    }

    /// The HTTP answer to one `/v1/rpc` body: 200 with the JSON-RPC response, 204 when every request was a
    /// notification, 415 for a body that is not JSON.
    /// `charge(n)`: the client's bucket pays for the `n` requests of a batch beyond the first (the HTTP
    /// request itself paid one); false refuses the batch with 429 before any of it is forwarded.
    public func rpc(body: [UInt8], bearer: String?, clientAddress: String? = nil, charge: (Int) -> Bool = { _ in true }) async
        -> (HTTPResponse.Status, [UInt8])
    {
        // Never fails: every outcome is an answer.
        (try? await rpc(body: body, bearer: bearer, clientAddress: clientAddress, charge: charge, on: MultiThreadedEventLoopGroup.singleton.any())
            .get()) ?? (.internalServerError, [])
    }

    /// `rpc` on an event loop, without a Swift task (`EventLoopRoutes`); the future completes on `eventLoop`
    /// and never fails. Batch members are forwarded one after another, in order.
    func rpc(body: [UInt8], bearer: String?, clientAddress: String?, charge: (Int) -> Bool, on eventLoop: any EventLoop)
        -> EventLoopFuture<(HTTPResponse.Status, [UInt8])>
    {
        // The suite's own scanner (strict, bounded nesting, ids kept byte for byte): params are forwarded as
        // the app sent them unless the edge must add or drop a member.
        switch RPCMessageParser.parse(body, limits: .init(maxNestingDepth: 64, maxBatchSize: 64)) {
        case .single(.failure(let rejection)):
            return eventLoop.makeSucceededFuture((.ok, Self.line(failureFor: rejection.id, rejection.error)))
        case .single(.success(let request)):
            return one(request, bearer: bearer, clientAddress: clientAddress, on: eventLoop).map { reply in
                reply.map { (.ok, $0) } ?? (.noContent, [])
            }
        case .batch(let items):
            guard charge(items.count - 1) else { return eventLoop.makeSucceededFuture((.tooManyRequests, [])) }
            var replies = eventLoop.makeSucceededFuture([[UInt8]]())
            for item in items {
                replies = replies.flatMap { done in
                    switch item {
                    case .failure(let rejection):
                        return eventLoop.makeSucceededFuture(done + [Self.line(failureFor: rejection.id, rejection.error)])
                    case .success(let request):
                        return self.one(request, bearer: bearer, clientAddress: clientAddress, on: eventLoop).map { reply in
                            reply.map { done + [$0] } ?? done
                        }
                    }
                }
            }
            return replies.map { replies in
                guard !replies.isEmpty else { return (.noContent, []) }
                var out: [UInt8] = [UInt8(ascii: "[")]
                for (index, reply) in replies.enumerated() {
                    if index > 0 { out.append(UInt8(ascii: ",")) }
                    out += reply
                }
                out.append(UInt8(ascii: "]"))
                return (.ok, out)
            }
        }
    }

    /// One request: forwarded if its method is public here; nil for a notification.
    private func one(_ request: RPCRequest, bearer: String?, clientAddress: String?, on eventLoop: any EventLoop)
        -> EventLoopFuture<[UInt8]?>
    {
        let id = request.id
        guard let service = publicMethods[request.method], let client = clients[service] else {
            return eventLoop.makeSucceededFuture(id.map { Self.line(failureFor: $0, RPCError.methodNotFound(request.method)) })
        }
        let forwarded: Forwarded
        switch Self.forwardedParams(
            request.params, method: request.method, bearer: bearer, clientAddress: clientAddress,
            internalToken: configuration.internalToken)
        {
        case .success(let result): forwarded = result
        case .failure(let error): return eventLoop.makeSucceededFuture(id.map { Self.line(failureFor: $0, error) })
        }
        // One session's calls go to one instance of a service that has several (fulfillment's known wallets stay right).
        return client.callRaw(
            method: request.method, params: forwarded.params, timeout: configuration.callTimeout, affinity: forwarded.session,
            on: eventLoop
        )
        .map { Result<[UInt8], RPCError>.success($0) }
        .recover { error in
            .failure(Self.passThrough(error as? RPCError ?? .unavailable("\(error)", reason: .connectionLost), service: service))
        }
        .map { outcome in
            guard let id else { return nil }
            var out: [UInt8] = []
            switch outcome {
            case .success(let result): JSONWriter.success(id: id, result: result, into: &out)
            case .failure(let error): JSONWriter.failure(id: id, error: error, into: &out)
            }
            return out
        }
    }

    /// The params the edge forwards, as bytes: the app's own object unchanged when nothing must change
    /// (the common case: no copy of the members), else rebuilt with the bearer as `session` (unless the app
    /// gave one), without an app's `internalToken` or `clientAddress`, and, on sign-ins and registrations,
    /// with the app's address and the internal token that lets accounts believe it. `session`: the session the call
    /// carries (the app's own, else the bearer) when it has a session token's shape: its affinity key.
    package static func forwardedParams(
        _ raw: [UInt8]?, method: String, bearer: String?, clientAddress: String?, internalToken: String?
    ) -> Result<Forwarded, RPCError> {
        let bytes = raw ?? Array("{}".utf8)
        let members: [JSONMember]
        do {
            let scanned = try JSONScanner.scan(bytes)
            guard scanned.root.kind == .object else { return .failure(.invalidParams("params must be an object")) }
            members = scanned.root.members
        } catch {
            return .failure(.invalidParams("params must be an object"))
        }
        let addsAddress = [AccountsLogin.name, AccountsRegister.name].contains(method) && clientAddress != nil && internalToken != nil
        // Two sessions in one call: the edge would route on one and the service might authenticate the other.
        guard members.lazy.filter({ $0.key == "session" }).count < 2 else {
            return .failure(.invalidParams("params name \"session\" twice", field: "session"))
        }
        let own = members.first { $0.key == "session" }
        let session =
            own.map { $0.kind == .string ? SessionToken.shaped(bytes[$0.value].dropFirst().dropLast()) : nil }
            ?? bearer.flatMap {
                SessionToken.shaped($0.utf8)
            }
        let addsSession = bearer != nil && own == nil
        let drops = members.contains { $0.key == "internalToken" || $0.key == "clientAddress" }
        guard addsAddress || addsSession || drops else { return .success(Forwarded(params: bytes, session: session)) }
        var out: [UInt8] = [UInt8(ascii: "{")]
        func append(_ key: String, _ value: some Collection<UInt8>) {
            if out.count > 1 { out.append(UInt8(ascii: ",")) }
            out += JSONWriter.quoted(key)
            out.append(UInt8(ascii: ":"))
            out += value
        }
        for member in members where member.key != "internalToken" && member.key != "clientAddress" {
            append(member.key, bytes[member.value])
        }
        if addsSession, let bearer { append("session", JSONWriter.quoted(bearer)) }
        if addsAddress, let clientAddress, let internalToken {
            append("clientAddress", JSONWriter.quoted(clientAddress))
            append("internalToken", JSONWriter.quoted(internalToken))
        }
        out.append(UInt8(ascii: "}"))
        return .success(Forwarded(params: out, session: session))
    }

    package struct Forwarded: Sendable {
        package var params: [UInt8]
        package var session: String?
    }

    /// A service's own answer (an application error) passes through; a transport failure is `unavailable`.
    static func passThrough(_ error: RPCError, service: String) -> RPCError {
        if error.code >= 1000 && error.code < 1100 && !error.has(.connectionLost) { return error }
        // The service's own JSON-RPC answers: its server errors, and the app's params or method refused (an app told to
        // retry a call that can never succeed would retry for ever).
        if error.code < 0 && error.code > -32100 || [-32602, -32601].contains(error.code) { return error }
        var failure = RPCError.unavailable("\(service) could not answer; nothing was changed, retry later", reason: .dependencyUnavailable)
        failure.data.extra["dependency"] = .string(service)
        return failure
    }

    static func line(failureFor id: RPCID, _ error: RPCError) -> [UInt8] {
        var out: [UInt8] = []
        JSONWriter.failure(id: id, error: error, into: &out)
        return out
    }

    // MARK: GET /readyz

    /// Ready when accounts, catalog and fulfillment each answer `rpc.ping` within a second:
    /// `{"accounts":"ok","catalog":"down",...}`; asked at most once a second (`Readiness`).
    public func readiness() async -> (ready: Bool, report: [UInt8]) {
        await readinessReports.report()
    }

    static func ping(_ clients: [String: RPCClient]) async -> (ready: Bool, report: [UInt8]) {
        var states: [String: JSONValue] = [:]
        for (name, client) in clients.sorted(by: { $0.key < $1.key }) {
            let ok = (try? await client.call(RPCPing.self, EmptyParams(), timeout: .seconds(1))) != nil
            states[name] = .string(ok ? "ok" : "down")
        }
        let ready = states.values.allSatisfy { $0 == .string("ok") }
        return (ready, (try? JSONByteEncoder.encode(JSONValue.object(states))) ?? [])
    }

    // MARK: POST /v1/notifications/appstore

    /// Apple's webhook: 200 once fulfillment has verified the notification and recorded it durably
    /// (`fulfillment.receiveNotification`; it is processed from fulfillment's inbox, retried there if that
    /// fails), 400 for one that fails verification (a forgery: logged), 503 when it cannot be recorded
    /// now (fulfillment or verification down): Apple delivers it again later.
    public func appStoreNotification(body: [UInt8], sandbox: Bool) async -> HTTPResponse.Status {
        (try? await webhookAnswer(body: body, sandbox: sandbox, on: MultiThreadedEventLoopGroup.singleton.any()).get()) ?? .serviceUnavailable
    }

    /// The webhook's check before its body is read: the address's own bucket (429 with `Retry-After`).
    func webhookAdmission(headers: HTTPFields, peer: String?) -> HTTPAnswer? {
        let address = clientAddress(peer: peer, forwardedFor: headers[.xForwardedFor])
        guard let wait = webhookLimiter.take(address) else { return nil }
        return .tooManyRequests(wait: wait)
    }

    /// `appStoreNotification` on an event loop (`EventLoopRoutes`): never fails; completes on `eventLoop`.
    /// The signed payload is forwarded as the JSON string Apple sent (not decoded and encoded again).
    func webhookAnswer(body: [UInt8], sandbox: Bool, on eventLoop: any EventLoop) -> EventLoopFuture<HTTPResponse.Status> {
        guard let scanned = try? JSONScanner.scan(body), scanned.root.kind == .object,
            let payload = scanned.root.members.first(where: { $0.key == "signedPayload" }), body[payload.value.lowerBound] == UInt8(ascii: "\"")
        else { return eventLoop.makeSucceededFuture(.badRequest) }
        let params = Array(#"{"signedPayload":"#.utf8) + body[payload.value]
        return recordNotification(
            method: FulfillmentReceiveNotification.name, params: params, store: "App Store", sender: "Apple", on: eventLoop,
            metadata: ["sandboxURL": "\(sandbox)"]
        ) { _ in .badRequest }
    }

    /// Hands a store's notification to fulfillment (`params`: the method's own fields, an object not yet closed; the
    /// answer-once-recorded flag and the internal token are added here) on `eventLoop`, never failing: 200 once recorded,
    /// `refused`'s status when verification refuses it (logged), 503 when it cannot be recorded now (`sender` retries).
    func recordNotification(
        method: String, params: [UInt8], store: String, sender: String, on eventLoop: any EventLoop, metadata: Logger.Metadata = [:],
        refused: @escaping @Sendable (RPCError) -> HTTPResponse.Status
    ) -> EventLoopFuture<HTTPResponse.Status> {
        guard let client = clients["fulfillment"] else { return eventLoop.makeSucceededFuture(.serviceUnavailable) }
        var params = params
        if configuration.webhookAnswersOnceRecorded { params += Array(#","processLater":true"#.utf8) }
        if let token = configuration.internalToken { params += Array(#","internalToken":"#.utf8) + JSONWriter.quoted(token) }
        params.append(UInt8(ascii: "}"))
        let logger = self.logger
        return client.callRaw(method: method, params: params, timeout: configuration.callTimeout, on: eventLoop)
            .map { bytes -> HTTPResponse.Status in
                // Each one recorded is in fulfillment's inbox and in the route's metrics: a line per notification only at
                // debug (at info, the line and the log pipe behind it cost a flood 7-10% of its rate: Benchmarks/README.md).
                guard logger.logLevel <= .debug else { return .ok }
                let result = try? RPCCodec.decodeResult(FulfillmentReceiveNotification.Result.self, from: bytes)
                logger.debug(
                    "\(store) notification recorded",
                    metadata: metadata.merging(
                        [
                            "notificationUUID": "\(result?.notificationUUID ?? "?")", "state": "\(result?.state.rawValue ?? "?")",
                            "firstDelivery": "\(result?.firstDelivery ?? false)",
                        ], uniquingKeysWith: { _, new in new }))
                return .ok
            }
            .recover { error in
                let error = error as? RPCError ?? .unavailable("\(error)", reason: .connectionLost)
                if error.knownCode == .invalidReceipt {
                    logger.warning("\(store) notification refused: it failed verification", metadata: ["reason": "\(error.data.reason)"])
                    return refused(error)
                }
                logger.error("\(store) notification could not be recorded; \(sender) will retry", metadata: ["error": "\(error.message)"])
                return .serviceUnavailable
            }
    }

    // MARK: GET /v1/content/{contentId}

    /// A content file for a signed URL (`ContentURLSigner`): 403 for a URL that is tampered with, expired or
    /// made for another file; 404 when the file is not installed; single byte ranges (206, 416), `ETag` (the
    /// file's SHA-256), `If-Range`, `HEAD`. The file is read in `contentChunkBytes` chunks straight into the
    /// buffers written to the connection, or, over plain HTTP/1.1 (`zeroCopy`), handed to the kernel with
    /// `sendfile` by `FileRegionResponses`.
    func content(_ request: Request, context: EdgeRequestContext, contentId: String, head: Bool, zeroCopy: Bool) async -> Response {
        guard let files = contentFiles, let signer = configuration.contentSigner else { return Self.plain(.notFound, "not found") }
        // Downloads pay into the same per-address bucket as /v1/rpc: a valid URL cannot be fetched in a
        // loop to burn the edge's bandwidth and disk, and guessing signatures is bounded too.
        let address = clientAddress(peer: context.remoteAddress?.ipAddress, forwardedFor: request.headers[.xForwardedFor])
        if let wait = limiter.take(address) {
            return HTTPAnswer.tooManyRequests(wait: wait).response
        }
        var query: [String: String] = [:]
        for (key, value) in request.uri.queryParameters { query[String(key)] = String(value) }
        switch signer.check(contentId: contentId, query: query, nowMs: configuration.clock.nowMs) {
        case .failure(let refusal):
            logger.notice(
                "content URL refused", metadata: ["reason": "\(refusal.rawValue)", "contentId": "\(contentId.prefix(128))"])
            return Self.plain(.forbidden, refusal == .expired ? "this link has expired; ask for a new one" : "forbidden")
        case .success(let grant):
            let installed: ContentFiles.Installed?
            do {
                installed = try await NIOThreadPool.singleton.runIfActive { try files.installed(grant.contentId) }
            } catch {
                logger.error("content file unreadable", metadata: ["contentId": "\(grant.contentId)", "error": "\(error)"])
                return Self.plain(.internalServerError, "the file could not be read")
            }
            guard let installed else { return Self.plain(.notFound, "not installed") }
            let etag = "\"\(installed.sha256)\""
            var headers: HTTPFields = [
                .eTag: etag, .acceptRanges: "bytes", .contentType: "application/octet-stream",
                .cacheControl: "private, max-age=\(max(0, (grant.expiresAtMs - configuration.clock.nowMs) / 1000))",
            ]
            let range: ClosedRange<Int64>
            let status: HTTPResponse.Status
            switch ByteRanges.resolve(
                range: request.headers[.range], ifRange: request.headers[.ifRange], etag: etag, size: installed.size)
            {
            case .unsatisfiable:
                headers[.contentRange] = "bytes */\(installed.size)"
                return Response(status: .rangeNotSatisfiable, headers: headers)
            case .full:
                guard installed.size > 0 else {  // an empty file: no range to build
                    headers[.contentLength] = "0"
                    return Response(status: .ok, headers: headers, body: .init())
                }
                range = 0...(installed.size - 1)
                status = .ok
            case .partial(let part):
                range = part
                status = .partialContent
                headers[.contentRange] = "bytes \(part.lowerBound)-\(part.upperBound)/\(installed.size)"
            }
            let length = range.upperBound - range.lowerBound + 1
            headers[.contentLength] = String(length)
            if head || length == 0 { return Response(status: status, headers: headers, body: .init()) }
            if zeroCopy {
                headers[HTTPField.Name(FileRegionResponses.header)!] = "\(range.lowerBound) \(length) \(installed.path)"
                return Response(status: status, headers: headers, body: .init())
            }
            do {
                let body = try await fileIO.loadFile(
                    path: installed.path, range: Int(range.lowerBound)...Int(range.upperBound), context: context,
                    chunkLength: configuration.contentChunkBytes)
                return Response(status: status, headers: headers, body: body)
            } catch {
                return Self.plain(.notFound, "not installed")
            }
        }
    }

    static func isLoopback(_ address: String?) -> Bool {
        guard let address else { return false }
        return address.hasPrefix("127.") || address == "::1" || address == "::ffff:127.0.0.1"
    }

    static func plain(_ status: HTTPResponse.Status, _ text: String) -> Response {
        Response(status: status, headers: [.contentType: "text/plain"], body: .init(byteBuffer: ByteBuffer(string: text + "\n")))
    }

    // MARK: HTTP

    /// The client's address as the limits count it (`ClientAddress.limitKey`: an IPv6 address by its /64): the TCP peer,
    /// or the last `X-Forwarded-For` hop when the peer is a trusted proxy.
    func clientAddress(peer: String?, forwardedFor: String?) -> String {
        guard let peer else { return "unknown" }
        if configuration.trustedProxies.contains(peer), let forwarded = forwardedFor?.split(separator: ",").last {
            return ClientAddress.limitKey(forwarded.trimmingCharacters(in: .whitespaces))
        }
        return ClientAddress.limitKey(peer)
    }

    /// The Hummingbird router: `/v1/rpc`, the two notification URLs and `/healthz`.
    /// `zeroCopy`: content bodies are sent by `FileRegionResponses` (only for `ZeroCopyHTTP1Channel`, plain HTTP/1.1).
    public func router(zeroCopy: Bool = false) -> Router<EdgeRequestContext> {
        let router = Router(context: EdgeRequestContext.self)
        router.add(middleware: HTTPServerMetrics(metrics: requestMetrics))
        let maxBody = configuration.maxBodyBytes
        router.get("healthz") { _, _ -> Response in
            Response(status: .ok, headers: [.contentType: "text/plain"], body: .init(byteBuffer: ByteBuffer(string: "ok\n")))
        }
        // Prometheus text, to scrapers on this machine only: the public port does not publish it.
        router.get("metrics") { request, context -> Response in
            // A loopback peer that is a trusted proxy (or says it forwards) is relaying the public: not a scraper.
            let peer = context.remoteAddress?.ipAddress
            guard Self.isLoopback(peer), !self.configuration.trustedProxies.contains(peer ?? ""), request.headers[.xForwardedFor] == nil
            else { return Self.plain(.notFound, "not found") }
            var body: [UInt8] = []
            self.metricsRegistry.emit(into: &body)
            return Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(bytes: body)))
        }
        router.get("readyz") { _, _ -> Response in
            let (ready, report) = await self.readiness()
            return Response(
                status: ready ? .ok : .serviceUnavailable, headers: [.contentType: "application/json"],
                body: .init(byteBuffer: ByteBuffer(bytes: report)))
        }
        router.post("v1/rpc") { request, context -> Response in
            // Over HTTP/2 and when `EventLoopRoutes` hands a request on (see there); the same steps as there.
            let (address, refusal) = self.rpcAdmission(headers: request.headers, peer: context.remoteAddress?.ipAddress)
            if let refusal { return refusal.response }
            guard let buffer = try? await request.body.collect(upTo: maxBody) else { return Response(status: .contentTooLarge) }
            let answer = try await self.rpcAnswer(
                headers: request.headers, address: address, body: Array(buffer: buffer), on: MultiThreadedEventLoopGroup.singleton.any()
            ).get()
            return answer.response
        }
        router.get("v1/content/:contentId") { request, context -> Response in
            await self.content(request, context: context, contentId: context.parameters.get("contentId") ?? "", head: false, zeroCopy: zeroCopy)
        }
        router.head("v1/content/:contentId") { request, context -> Response in
            await self.content(request, context: context, contentId: context.parameters.get("contentId") ?? "", head: true, zeroCopy: zeroCopy)
        }
        addRetentionRoute(to: router)
        addPlayNotificationRoute(to: router)
        for (path, sandbox) in [("v1/notifications/appstore", false), ("v1/notifications/appstore/sandbox", true)] {
            // Through the router when `EventLoopRoutes` hands a request on (see there); the same steps as there.
            router.post(RouterPath(path)) { request, context -> Response in
                if let refusal = self.webhookAdmission(headers: request.headers, peer: context.remoteAddress?.ipAddress) {
                    return refusal.response
                }
                guard let buffer = try? await request.body.collect(upTo: self.configuration.maxWebhookBodyBytes) else {
                    return Response(status: .contentTooLarge)
                }
                return Response(status: await self.appStoreNotification(body: Array(buffer: buffer), sandbox: sandbox))
            }
        }
        return router
    }

    /// A Hummingbird application serving the router on `host:port`: with `tls`, HTTPS with HTTP/2 by ALPN
    /// and HTTP/1.1; without, plain HTTP/1.1 (loopback, or behind a TLS-terminating proxy).
    public func application(
        host: String, port: Int, tls: TLSConfiguration? = nil,
        onRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) throws -> some ApplicationProtocol {
        let requestTimeout = configuration.requestTimeout
        let maxBody = configuration.maxBodyBytes
        let maxWebhookBody = configuration.maxWebhookBodyBytes
        let http1 = HTTP1Channel.Configuration(
            additionalChannelHandlers: [
                RequestDeadline(timeout: requestTimeout), EventLoopRoutes(edge: self, maxBodyBytes: maxBody, maxWebhookBodyBytes: maxWebhookBody),
            ],
            httpDecoderConfiguration: .init(
                maxHeaderFieldSize: configuration.maxHeaderBytes, maxHeaderListSize: configuration.maxHeaderBytes,
                maxHeaderFieldCount: configuration.maxHeaderFields))
        var http2Streams = http1
        // Each HTTP/2 stream is a channel of its own: the same deadline for its request (the head comes whole in one
        // HEADERS frame; the body could trickle), and closing the stream resets it alone, not the connection. Without
        // it, an open stream kept the connection from its idle timeout with up to 2 MiB of body buffered, 100 streams
        // a connection.
        http2Streams.additionalChannelHandlers = {
            [
                RequestDeadline(timeout: requestTimeout),
                EventLoopRoutes(edge: self, maxBodyBytes: maxBody, maxWebhookBodyBytes: maxWebhookBody),
            ]
        }
        let http2 = HTTP2UpgradeChannel.Configuration(idleTimeout: configuration.idleTimeout, streamConfiguration: http2Streams)
        let stall = configuration.stalledWriteTimeout
        let connections = self.connections
        return Application(
            router: router(zeroCopy: tls == nil && configuration.contentSendfile),
            server: tls.map { tls in
                HTTPServerBuilder { responder in
                    ConnectionCapChannel(
                        base: WriteProgressDeadlineChannel(
                            base: TLSRecordCoalescingChannel(
                                base: try HTTP2UpgradeChannel(tlsConfiguration: tls, configuration: http2, responder: responder)),
                            timeout: stall), connections: connections)
                }
            }
                ?? HTTPServerBuilder { responder in
                    ConnectionCapChannel(
                        base: WriteProgressDeadlineChannel(base: ZeroCopyHTTP1Channel(responder: responder, configuration: http1), timeout: stall),
                        connections: connections)
                },
            configuration: .init(address: .hostname(host, port: port), serverName: Self.serverName),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? port) }, logger: logger)
    }

    /// The `Server` header of every answer.
    static let serverName = "iap-edge"

    /// The server's TLS settings from PEM files: TLS 1.2 or later. The key is read once and never logged.
    public static func tlsConfiguration(certificateFile: String, keyFile: String) throws -> TLSConfiguration {
        let chain = try NIOSSLCertificate.fromPEMFile(certificateFile).map { NIOSSLCertificateSource.certificate($0) }
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: chain, privateKey: .privateKey(try NIOSSLPrivateKey(file: keyFile, format: .pem)))
        tls.minimumTLSVersion = .tlsv12
        return tls
    }
}

/// Hummingbird's request context plus the TCP peer (the client, or a trusted proxy).
public struct EdgeRequestContext: Hummingbird.RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let remoteAddress: SocketAddress?

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.remoteAddress = source.channel.remoteAddress
    }
}

extension HTTPField.Name {
    static let xForwardedFor = Self("X-Forwarded-For")!
}
