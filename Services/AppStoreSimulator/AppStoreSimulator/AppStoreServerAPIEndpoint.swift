import Crypto
import Foundation
import Hummingbird
import IAPProtocol
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import ServiceSupport

/// Apple's App Store Server API, answered by the simulator from its own data on its HTTP port: the paths
/// Apple documents (`/inApps/v1/transactions/{id}`, `/inApps/v2/history/{id}`, `/inApps/v1/lookup/{orderId}`)
/// for production, and the same under `/sandbox/` for sandbox. Every request needs a bearer JWT signed
/// ES256 with the simulator's API key (`sim.apiKey`), as Apple checks it: `kid`, `iss`, `aud`
/// `appstoreconnect-v1`, `bid` (an app this App Store has sold something for), not expired, `exp` at most
/// 60 minutes ahead (and after `iat`, which is optional, as Apple's libraries leave it out); else 401. Errors are
/// Apple's `{errorCode, errorMessage}` with Apple's codes; `sim.setFault` (http429, http503, slow) applies.
public final class AppStoreServerAPIEndpoint: Sendable {
    let simulator: AppStoreSimulator
    private let faults: SimHTTPFaults
    private let wallClock: ServiceClock
    /// Transactions per history page, as Apple's.
    public static let pageSize = 20
    private let requests = NIOLockedValueBox(0)
    /// Requests received so far (each is one call against the developer's key and Apple's rate limit).
    public var requestCount: Int { requests.withLockedValue { $0 } }

    public init(simulator: AppStoreSimulator, faults: SimHTTPFaults, wallClock: ServiceClock = .system) {
        self.simulator = simulator
        self.faults = faults
        self.wallClock = wallClock
    }

    /// Apple's error answer.
    struct APIError: Error {
        var status: HTTPResponse.Status
        var code: Int
        var message: String

        static let unauthorized = APIError(status: .unauthorized, code: 0, message: "")
        static func badRequest(_ code: Int, _ message: String) -> APIError { .init(status: .badRequest, code: code, message: message) }
        static let transactionNotFound = APIError(status: .notFound, code: 4_040_010, message: "Transaction id not found.")
        static let invalidTransactionId = APIError.badRequest(4_000_006, "Invalid transaction id.")
        static let invalidRevision = APIError.badRequest(4_000_005, "Invalid request revision.")
    }

    func addRoutes(to router: Router<BasicRequestContext>) {
        for (prefix, environment) in [("", SimEnvironment.production), ("sandbox/", SimEnvironment.sandbox)] {
            router.get(RouterPath("\(prefix)inApps/v1/transactions/appTransactions/:id")) { request, context -> Response in
                await self.respond(request) { bid in
                    try self.appTransactionInfo(context.parameters.get("id") ?? "", environment: environment, bid: bid)
                }
            }
            router.get(RouterPath("\(prefix)inApps/v1/transactions/:id")) { request, context -> Response in
                await self.respond(request) { bid in
                    try self.transactionInfo(context.parameters.get("id") ?? "", environment: environment, bid: bid)
                }
            }
            // Get Transaction History: v2, and v1 (deprecated by Apple, still the default of Apple's libraries).
            for version in ["v1", "v2"] {
                router.get(RouterPath("\(prefix)inApps/\(version)/history/:id")) { request, context -> Response in
                    await self.respond(request) { bid in
                        try self.history(context.parameters.get("id") ?? "", query: Self.query(request), environment: environment, bid: bid)
                    }
                }
            }
            router.get(RouterPath("\(prefix)inApps/v1/lookup/:orderId")) { request, context -> Response in
                await self.respond(request) { bid in
                    try self.lookUpOrder(context.parameters.get("orderId") ?? "", environment: environment, bid: bid)
                }
            }
            addSubscriptionRoutes(to: router, prefix: prefix, environment: environment)
            addMassExtensionRoutes(to: router, prefix: prefix, environment: environment)
            addNotificationRoutes(to: router, prefix: prefix, environment: environment)
            addMessagingRoutes(to: router, prefix: prefix, environment: environment)
        }
    }

    /// Query parameters by name, each with every value given.
    static func query(_ request: Request) -> [String: [String]] {
        var query: [String: [String]] = [:]
        for (key, value) in request.uri.queryParameters { query[String(key), default: []].append(String(value)) }
        return query
    }

    /// Faults, then authentication, then `body` with the token's bundle id and the request body (at most
    /// 64 KiB); JSON out (`status`, no body when `body` answers nil), Apple's errors. `body` reads SQLite and
    /// signs JWS: it runs on NIO's blocking pool, never on the cooperative threads.
    func respond(
        _ request: Request, status: HTTPResponse.Status = .ok, maxBodyBytes: Int = 64 << 10,
        _ body: @escaping @Sendable (String, [UInt8]) throws -> [String: Any]?
    ) async -> Response {
        requests.withLockedValue { $0 += 1 }
        let (mode, delayMs) = faults.take()
        switch mode {
        case .http429:
            // Apple's Retry-After is the UNIX time, in milliseconds, of the next request allowed ("Identifying rate limits").
            return Self.error(
                .init(status: .tooManyRequests, code: 4_290_000, message: "Rate limit exceeded."), retryAfter: wallClock.nowMs + 1_000)
        case .http503, .status21005:
            return Self.error(.init(status: .serviceUnavailable, code: 5_000_001, message: "An unknown retryable error occurred."))
        case .slow: try? await Task.sleep(nanoseconds: UInt64(delayMs) * 1_000_000)
        case .none: break
        }
        guard let bid = authorizedBundle(request.headers[.authorization]) else { return Self.error(.unauthorized) }
        var request = request
        guard let bytes = try? await request.collectBody(upTo: maxBodyBytes) else {
            return Self.error(.badRequest(4_000_000, "Invalid request."))
        }
        do {
            let json = try await NIOThreadPool.singleton.runIfActive { () -> Data? in
                try body(bid, Array(buffer: bytes)).map { try JSONSerialization.data(withJSONObject: $0, options: [.sortedKeys]) }
            }
            guard let json else { return Response(status: status) }
            return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: json)))
        } catch let error as APIError {
            return Self.error(error)
        } catch {
            return Self.error(.init(status: .internalServerError, code: 5_000_000, message: "An unknown error occurred."))
        }
    }

    static func error(_ error: APIError, retryAfter: Int64? = nil) -> Response {
        var headers: HTTPFields = [:]
        if let retryAfter { headers[.retryAfter] = String(retryAfter) }
        guard error.status != .unauthorized else { return Response(status: .unauthorized, headers: headers) }
        headers[.contentType] = "application/json"
        let body = (try? JSONSerialization.data(withJSONObject: ["errorCode": error.code, "errorMessage": error.message])) ?? Data()
        return Response(status: error.status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }

    // MARK: authentication

    /// `respond` for endpoints that read no request body.
    func respond(_ request: Request, _ body: @escaping @Sendable (String) throws -> [String: Any]) async -> Response {
        await respond(request) { bid, _ in try body(bid) }
    }

    /// The `bid` of a valid bearer token, else nil (401).
    func authorizedBundle(_ authorization: String?) -> String? {
        guard let authorization, authorization.hasPrefix("Bearer ") else { return nil }
        let parts = authorization.dropFirst(7).split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Self.base64URL(parts[0]), let payloadBytes = Self.base64URL(parts[1]),
            let signatureBytes = Self.base64URL(parts[2]),
            let header = try? JSONSerialization.jsonObject(with: headerBytes) as? [String: Any],
            let payload = try? JSONSerialization.jsonObject(with: payloadBytes) as? [String: Any]
        else { return nil }
        let key = simulator.apiKey
        guard header["alg"] as? String == "ES256", header["kid"] as? String == key.keyId,
            payload["iss"] as? String == key.issuerId, payload["aud"] as? String == "appstoreconnect-v1",
            let bid = payload["bid"] as? String, !bid.isEmpty,
            let exp = (payload["exp"] as? NSNumber)?.int64Value
        else { return nil }
        // Apple's own libraries send no `iat` (only `exp`, 5 minutes ahead), and Apple accepts that: `exp` at most
        // 60 minutes ahead; an `iat`, when given, not in the future and at most 60 minutes before `exp`.
        let now = wallClock.nowMs / 1000
        guard exp > now, exp <= now + 3600 else { return nil }
        if let iatValue = payload["iat"] {
            guard let iat = (iatValue as? NSNumber)?.int64Value, iat <= now + 60, exp > iat, exp - iat <= 3600 else { return nil }
        }
        // A bundle id no app in this App Store has: not a key of this team's apps.
        guard (try? simulator.api.knowsBundle(bid)) == true else { return nil }
        guard let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes),
            key.privateKey.publicKey.isValidSignature(signature, for: SHA256.hash(data: Array("\(parts[0]).\(parts[1])".utf8)))
        else { return nil }
        return bid
    }

    /// A paging position (`revision`, `paginationToken`): opaque to callers, the last sequence number shown.
    static func token(_ seq: Int64) -> String {
        Data("sim1:\(seq)".utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    static func position(_ token: String, orThrow error: APIError) throws -> Int64 {
        guard let data = base64URL(Substring(token)), let text = String(data: data, encoding: .utf8), text.hasPrefix("sim1:"),
            let seq = Int64(text.dropFirst(5))
        else { throw error }
        return seq
    }

    static func base64URL(_ part: Substring) -> Data? {
        var text = part.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        return Data(base64Encoded: text)
    }

    // MARK: endpoints

    /// The transaction, if it exists in this environment and app.
    func transaction(_ id: String, environment: SimEnvironment, bid: String) throws -> SimTransaction {
        guard !id.isEmpty, id.allSatisfy(\.isNumber) else { throw APIError.invalidTransactionId }
        // Another app's transaction is not found for this app, as Apple answers.
        guard let t = try simulator.api.apiTransaction(id), t.environment == environment, t.bundleId == bid else {
            throw APIError.transactionNotFound
        }
        return t
    }

    func transactionInfo(_ id: String, environment: SimEnvironment, bid: String) throws -> [String: Any] {
        let t = try transaction(id, environment: environment, bid: bid)
        return ["signedTransactionInfo": try simulator.signedTransaction(t, signedAt: try simulator.nowMs())]
    }

    static let productTypes: [String: ProductType] = [
        "AUTO_RENEWABLE": .autoRenewable, "NON_RENEWABLE": .nonRenewing, "CONSUMABLE": .consumable, "NON_CONSUMABLE": .nonConsumable,
    ]

    /// Get Transaction History v2: every transaction of the customer in this app and environment, filtered,
    /// sorted, 20 a page; `revision` continues after the last one returned.
    func history(_ id: String, query: [String: [String]], environment: SimEnvironment, bid: String) throws -> [String: Any] {
        let anchor = try transaction(id, environment: environment, bid: bid)
        func all(_ key: String) -> [String] { query[key] ?? [] }
        func one(_ key: String) -> String? { query[key]?.first }
        let sort = one("sort") ?? "ASCENDING"
        guard ["ASCENDING", "DESCENDING"].contains(sort) else { throw APIError.badRequest(4_000_021, "Invalid sort.") }
        var types: Set<ProductType> = []
        for name in all("productType") {
            guard let type = Self.productTypes[name] else { throw APIError.badRequest(4_000_022, "Invalid product type.") }
            types.insert(type)
        }
        let productIds = Set(all("productId"))
        if productIds.contains("") { throw APIError.badRequest(4_000_023, "Invalid product id.") }
        let groups = Set(all("subscriptionGroupIdentifier"))
        let start = try one("startDate").map { value -> Int64 in
            guard let ms = Int64(value), ms >= 0 else { throw APIError.badRequest(4_000_015, "Invalid start date.") }
            return ms
        }
        let end = try one("endDate").map { value -> Int64 in
            guard let ms = Int64(value), ms >= 0 else { throw APIError.badRequest(4_000_016, "Invalid end date.") }
            return ms
        }
        if let start, let end, start > end { throw APIError.badRequest(4_000_013, "Start date after end date.") }
        let revoked = try one("revoked").map { value -> Bool in
            guard value == "true" || value == "false" else { throw APIError.badRequest(4_000_030, "Invalid revoked.") }
            return value == "true"
        }
        if let ownership = one("inAppOwnershipType"), !["PURCHASED", "FAMILY_SHARED"].contains(ownership) {
            throw APIError.badRequest(4_000_026, "Invalid in-app ownership type.")
        }
        let after = try one("revision").map { try Self.position($0, orThrow: .invalidRevision) }
        var matching = (try simulator.api.apiHistory(of: anchor.transactionId) ?? []).filter { t in
            (types.isEmpty || types.contains(t.productType)) && (productIds.isEmpty || productIds.contains(t.productId))
                && (groups.isEmpty || (t.productType == .autoRenewable && groups.contains("sim-group")))
                && (start.map { t.purchaseDateMs >= $0 } ?? true) && (end.map { t.purchaseDateMs < $0 } ?? true)
                && (revoked.map { $0 == (t.cancellationDateMs != nil) } ?? true)
                && (one("inAppOwnershipType").map { $0 == (t.sharedFrom == nil ? "PURCHASED" : "FAMILY_SHARED") } ?? true)
        }
        matching.sort { sort == "ASCENDING" ? $0.seq < $1.seq : $0.seq > $1.seq }
        if let after { matching.removeAll { sort == "ASCENDING" ? $0.seq <= after : $0.seq >= after } }
        let page = Array(matching.prefix(Self.pageSize))
        let now = try simulator.nowMs()
        let last = page.last?.seq ?? after ?? (sort == "ASCENDING" ? 0 : Int64.max)
        var answer: [String: Any] = [
            "revision": Self.token(last),
            "bundleId": anchor.bundleId, "environment": environment.appleName, "hasMore": matching.count > page.count,
            "signedTransactions": try page.map { try simulator.signedTransaction($0, signedAt: now) },
        ]
        if environment == .production { answer["appAppleId"] = 1_234_567_890 }
        return answer
    }

    /// Look Up Order ID: `status` 0 with the order's transactions, or 1 (invalid) when there is no such order.
    func lookUpOrder(_ orderId: String, environment: SimEnvironment, bid: String) throws -> [String: Any] {
        let transactions = try simulator.api.apiOrder(orderId).filter { $0.environment == environment && $0.bundleId == bid }
        guard !transactions.isEmpty else { return ["status": 1, "signedTransactions": [String]()] }
        let now = try simulator.nowMs()
        return ["status": 0, "signedTransactions": try transactions.map { try simulator.signedTransaction($0, signedAt: now) }]
    }
}
