import Foundation
import GRDB
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import ServiceSupport

/// Google's side of the wire, on the simulator's HTTP port: the OAuth 2.0 token endpoint (`POST /token`), the push
/// keys (`GET /oauth2/v1/certs`, `/oauth2/v3/certs`) and the Play Developer API v3 purchase methods under
/// `/androidpublisher/v3/applications/{packageName}/`, each needing an access token from `/token`. Errors are Google's
/// JSON error body (`{error: {code, message, errors: [{message, domain, reason, location, locationType}], status}}`).
public final class PlayDeveloperAPI: Sendable {
    let simulator: PlaySimulator
    let wallClock: ServiceClock

    public init(simulator: PlaySimulator, wallClock: ServiceClock = .system) {
        self.simulator = simulator
        self.wallClock = wallClock
    }

    struct APIError: Error {
        var code: Int
        var status: String
        var message: String
        var reason: String
        var domain = "global"
        var location: String? = nil

        static func notFound(_ message: String, reason: String = "notFound", location: String? = nil) -> APIError {
            .init(code: 404, status: "NOT_FOUND", message: message, reason: reason, location: location)
        }
        static func invalid(_ message: String, reason: String = "invalidValue", location: String? = nil) -> APIError {
            .init(code: 400, status: "INVALID_ARGUMENT", message: message, reason: reason, location: location)
        }
        static let tokenNotFound = APIError.notFound("The purchase token was not found.", reason: "purchaseTokenNotFound", location: "token")
        static let wrongPackage = APIError(
            code: 400, status: "INVALID_ARGUMENT", message: "The purchase token does not match the package name.",
            reason: "purchaseTokenDoesNotMatchPackageName", domain: "androidpublisher", location: "token")
        static let invalidState = APIError(
            code: 400, status: "FAILED_PRECONDITION", message: "The purchase is not in a valid state to perform the desired operation.",
            reason: "invalidPurchaseState", domain: "androidpublisher", location: "token")
        static let unauthenticated = APIError(
            code: 401, status: "UNAUTHENTICATED",
            message:
                "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
            reason: "authError", location: "Authorization")

        var body: [String: Any] {
            var item: [String: Any] = ["message": message, "domain": domain, "reason": reason]
            if let location {
                item["location"] = location
                item["locationType"] = location == "Authorization" ? "header" : "parameter"
            }
            return ["error": ["code": code, "message": message, "errors": [item], "status": status] as [String: Any]]
        }
    }

    public func addRoutes(to router: Router<BasicRequestContext>) {
        router.post("token") { request, _ -> Response in
            let body = String(buffer: try await request.body.collect(upTo: 64 * 1024))
            switch self.simulator.accounts.exchange(form: Self.form(body), nowSeconds: self.wallClock.nowMs / 1000) {
            case .success(let answer): return Self.json(200, answer)
            case .failure(let e): return Self.json(e.status, ["error": e.error, "error_description": e.description])
            }
        }
        router.get("oauth2/v1/certs") { _, _ in Self.json(200, try self.simulator.accounts.certificates(), cacheSeconds: 3600) }
        router.get("oauth2/v3/certs") { _, _ in Self.json(200, try self.simulator.accounts.jwks(), cacheSeconds: 3600) }

        let app = "androidpublisher/v3/applications/:packageName"
        router.get(RouterPath("\(app)/purchases/products/:productId/tokens/:token")) { request, context in
            await self.answer(request) { db, _ in
                try self.product(context, db: db, productId: context.parameters.get("productId")).productPurchase
            }
        }
        router.post(RouterPath("\(app)/purchases/products/:productId/tokens/:token")) { request, context in
            let body = try await request.body.collect(upTo: 64 * 1024)
            return await self.answer(request) { db, _ in
                let (token, action) = try Self.split(context.parameters.get("token") ?? "")
                var p = try self.purchase(token, context, db: db)
                guard p.kind == .product, p.productId == context.parameters.get("productId") else {
                    throw APIError.invalid("Invalid Value", reason: "invalid")
                }
                guard !p.canceled else { throw APIError.invalidState }
                switch action {
                case "acknowledge":
                    p.acknowledged = true
                    if let payload = Self.object(body)?["developerPayload"] as? String { p.developerPayload = payload }
                case "consume":
                    p.consumed = true
                    p.acknowledged = true  // consuming acknowledges
                default: throw APIError.notFound("Method not found.")
                }
                try PlayStore.save(p, db: db)
                return nil
            }
        }
        router.get(RouterPath("\(app)/purchases/productsv2/tokens/:token")) { request, context in
            await self.answer(request) { db, _ in try self.product(context, db: db, productId: nil).productPurchaseV2 }
        }
        router.get(RouterPath("\(app)/purchases/subscriptionsv2/tokens/:token")) { request, context in
            await self.answer(request) { db, _ in
                try self.subscription(context.parameters.get("token") ?? "", context, db: db).subscriptionPurchaseV2
            }
        }
        router.post(RouterPath("\(app)/purchases/subscriptionsv2/tokens/:token")) { request, context in
            let body = try await request.body.collect(upTo: 64 * 1024)
            return await self.answer(request) { db, now in
                let (token, action) = try Self.split(context.parameters.get("token") ?? "")
                guard action == "revoke" else { throw APIError.notFound("Method not found.") }
                var s = try self.subscription(token, context, db: db)
                let refund = (Self.object(body)?["revocationContext"] as? [String: Any]) ?? [:]
                let kinds = ["fullRefund", "proratedRefund", "itemBasedRefund"].filter { refund[$0] != nil }
                guard kinds.count == 1 else {
                    throw APIError.invalid("A refund type must be specified in revocationContext.", reason: "required", location: "revocationContext")
                }
                guard s.state != .expired else { throw APIError.invalidState }
                for (at, event) in s.revoke(atMs: now, source: .developer, reason: .other, cancellation: .developer) {
                    try self.simulator.record(event, of: s, atMs: at, db: db)
                }
                try PlayStore.save(s, db: db)
                return [String: Any]()
            }
        }
        router.post(RouterPath("\(app)/purchases/subscriptions/:subscriptionId/tokens/:token")) { request, context in
            let body = try await request.body.collect(upTo: 64 * 1024)
            return await self.answer(request) { db, _ in
                let (token, action) = try Self.split(context.parameters.get("token") ?? "")
                guard action == "acknowledge" else { throw APIError.notFound("Method not found.") }
                var s = try self.subscription(token, context, db: db)
                // Any of the purchase's items names it (a DEFERRED replacement's lists the replaced plan's and the new one's).
                let named = context.parameters.get("subscriptionId")
                guard [s.productId, s.deferred?.productId, s.replacedItem?.productId].contains(named) else {
                    throw APIError.invalid("Invalid Value", reason: "invalid")
                }
                guard s.state != .expired else { throw APIError.invalidState }
                s.acknowledged = true
                if let payload = Self.object(body)?["developerPayload"] as? String { s.developerPayload = payload }
                try PlayStore.save(s, db: db)
                return nil
            }
        }
        router.get(RouterPath("\(app)/purchases/voidedpurchases")) { request, context in
            await self.answer(request) { db, now in
                try self.voided(package: context.parameters.get("packageName") ?? "", query: request.uri.queryParameters, nowMs: now, db: db)
            }
        }
        router.post(RouterPath("\(app)/orders/:orderAction")) { request, context in
            await self.answer(request) { db, now in
                let (orderId, action) = try Self.split(context.parameters.get("orderAction") ?? "", location: "orderId")
                guard action == "refund" else { throw APIError.notFound("Method not found.") }
                guard var p = try PlayStore.purchase(orderId: orderId, db: db), p.packageName == context.parameters.get("packageName") else {
                    throw APIError.notFound("The order was not found.", location: "orderId")
                }
                guard now - p.purchaseTimeMs < 3 * 365 * 86_400_000 else {
                    throw APIError.invalid("Orders older than 3 years cannot be refunded.", location: "orderId")
                }
                let revoke = request.uri.queryParameters.get("revoke") == "true"
                // Refunded without revoking: the customer keeps the item and the voided purchases API never shows it.
                if revoke, p.isLive {
                    for (at, event) in p.revoke(atMs: now, source: .developer, reason: .other, cancellation: .developer) {
                        try self.simulator.record(event, of: p, atMs: at, db: db)
                    }
                } else if p.kind == .product {
                    p.refundableQuantity = 0
                }
                try PlayStore.save(p, db: db)
                return nil
            }
        }
    }

    /// Authenticates, then runs `body` in one simulator transaction (after the clock's due work) and answers its JSON
    /// (nil: an empty 200, as Google's acknowledge, consume and refund answer).
    private func answer(_ request: Request, _ body: @escaping @Sendable (Database, Int64) throws -> [String: Any]?) async -> Response {
        guard simulator.accounts.authorizes(request.headers[.authorization], nowSeconds: wallClock.nowMs / 1000) else {
            return Self.json(401, APIError.unauthenticated.body, extra: [.wwwAuthenticate: "Bearer realm=\"https://accounts.google.com/\""])
        }
        switch simulator.takeFault() {
        case .http503:
            let e = APIError(code: 503, status: "UNAVAILABLE", message: "The service is currently unavailable.", reason: "backendError")
            return Self.json(503, e.body)
        case .http429:
            let e = APIError(code: 429, status: "RESOURCE_EXHAUSTED", message: "Quota exceeded.", reason: "rateLimitExceeded")
            return Self.json(429, e.body)
        case .none: break
        }
        do {
            let result = try await NIOThreadPool.singleton.runIfActive {
                try self.simulator.write { db, now in try body(db, now) }.map { try Self.data($0) }
            }
            guard let result else { return Response(status: .ok) }
            return Self.json(200, data: result)
        } catch let e as APIError {
            return Self.json(e.code, e.body)
        } catch {
            let e = APIError(code: 500, status: "INTERNAL", message: "Internal error encountered.", reason: "backendError")
            return Self.json(500, e.body)
        }
    }

    private func purchase(_ token: String, _ context: BasicRequestContext, db: Database) throws -> PlayPurchase {
        guard let p = try PlayStore.purchase(token, db: db) else { throw APIError.tokenNotFound }
        guard p.packageName == context.parameters.get("packageName") else { throw APIError.wrongPackage }
        return p
    }

    private func product(_ context: BasicRequestContext, db: Database, productId: String?) throws -> PlayPurchase {
        let p = try purchase(context.parameters.get("token") ?? "", context, db: db)
        guard p.kind == .product, productId == nil || p.productId == productId else { throw APIError.invalid("Invalid Value", reason: "invalid") }
        return p
    }

    private func subscription(_ token: String, _ context: BasicRequestContext, db: Database) throws -> PlayPurchase {
        let p = try purchase(token, context, db: db)
        guard p.kind == .subscription else { throw APIError.invalid("Invalid Value", reason: "invalid", location: "token") }
        return p
    }

    /// purchases.voidedpurchases.list: the last 30 days at most, up to 1,000 a page, token paging.
    private func voided(package: String, query: Parameters, nowMs: Int64, db: Database) throws -> [String: Any] {
        let day: Int64 = 86_400_000
        var start = nowMs - 30 * day
        var end = nowMs
        var afterSeq: Int64 = 0
        var type = Int(query.get("type") ?? "0") ?? -1
        var partial = query.get("includeQuantityBasedPartialRefund") == "true"
        guard query.get("startIndex") == nil else {
            throw APIError.invalid("Indexed paging is not enabled for this collection; use token.", location: "startIndex")
        }
        let limit = Int(query.get("maxResults") ?? "1000") ?? 0
        guard (1...1000).contains(limit) else { throw APIError.invalid("maxResults must be 1 to 1000.", location: "maxResults") }
        if let token = query.get("token") {
            // The filters travel in the token: start and end are ignored when one is given, as Google's are.
            let parts =
                CompactJWT.data(base64url: token).map { String(decoding: $0, as: UTF8.self).split(separator: " ").compactMap { Int64($0) } } ?? []
            guard parts.count == 5 else { throw APIError.invalid("Invalid page token.", location: "token") }
            (afterSeq, start, end, type, partial) = (parts[0], parts[1], parts[2], Int(parts[3]), parts[4] == 1)
        } else {
            if let given = query.get("startTime") {
                guard let ms = Int64(given), ms >= nowMs - 30 * day else {
                    throw APIError.invalid("startTime cannot be older than 30 days.", location: "startTime")
                }
                start = ms
            }
            if let given = query.get("endTime") {
                guard let ms = Int64(given), ms <= nowMs, ms >= start else {
                    throw APIError.invalid("endTime cannot be greater than the current time, nor before startTime.", location: "endTime")
                }
                end = ms
            }
        }
        guard type == 0 || type == 1 else { throw APIError.invalid("type must be 0 or 1.", location: "type") }
        let rows = try PlayStore.voided(
            packageName: package, startMs: start, endMs: end, afterSeq: afterSeq, subscriptions: type == 1, partial: partial,
            limit: limit + 1, db: db)
        var answer: [String: Any] = [:]
        let page = rows.prefix(limit)
        answer["voidedPurchases"] = try page.map { try JSONSerialization.jsonObject(with: Data($0.body.utf8)) }
        if rows.count > limit, let last = page.last {
            let next = "\(last.seq) \(start) \(end) \(type) \(partial ? 1 : 0)"
            answer["tokenPagination"] = ["nextPageToken": CompactJWT.base64url(Data(next.utf8))]
        }
        answer["pageInfo"] = ["resultPerPage": limit]
        return answer
    }

    /// `{token}:{action}` of Google's custom methods.
    static func split(_ segment: String, location: String = "token") throws -> (String, String) {
        guard let colon = segment.lastIndex(of: ":") else { throw APIError.notFound("Method not found.") }
        return (String(segment[..<colon]), String(segment[segment.index(after: colon)...]))
    }

    static func object(_ buffer: ByteBuffer) -> [String: Any]? {
        guard buffer.readableBytes > 0 else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(buffer: buffer))) as? [String: Any]
    }

    static func form(_ body: String) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in body.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1).map {
                String($0).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? ""
            }
            if kv.count == 2 { fields[kv[0]] = kv[1] }
        }
        return fields
    }

    static func data(_ object: Any) throws -> Data {
        try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
    }

    static func json(_ status: Int, _ object: Any, cacheSeconds: Int? = nil, extra: HTTPFields = [:]) -> Response {
        json(status, data: (try? data(object)) ?? Data(), cacheSeconds: cacheSeconds, extra: extra)
    }

    static func json(_ status: Int, data: Data, cacheSeconds: Int? = nil, extra: HTTPFields = [:]) -> Response {
        var headers = extra
        headers[.contentType] = "application/json; charset=UTF-8"
        if let cacheSeconds { headers[.cacheControl] = "public, max-age=\(cacheSeconds)" }
        return Response(status: .init(code: status), headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

extension PlayDeveloperAPI {
    /// The HTTP server of the token endpoint, the certs and the Developer API (`onRunning` gets the bound port).
    public func application(
        host: String, port: Int, logger: Logger, onRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        let router = Router()
        addRoutes(to: router)
        return Application(
            router: router, configuration: .init(address: .hostname(host, port: port), serverName: "play-sim"),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? port) }, logger: logger)
    }
}
