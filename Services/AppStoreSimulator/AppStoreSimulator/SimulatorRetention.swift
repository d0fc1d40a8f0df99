import AsyncHTTPClient
import Foundation
import GRDB
import IAPProtocol
import JSONRPC
import NIOCore

/// Apple's Retention Messaging, the App Store's side: when a customer looks at cancelling, Apple POSTs a signed
/// `RealtimeRequestBody {signedPayload}` to the app's realtime URL and shows what the answer chooses (exactly one of
/// `message`, `alternateProduct`, `promotionalOffer`), or the default message when there is no URL, no answer in time or
/// no valid choice. The decoded payload: originalTransactionId, appAppleId, productId, userLocale, requestIdentifier,
/// environment, signedDate (docs: retentionmessaging/decodedrealtimerequestbody).
extension AppStoreSimulator {
    /// How long the simulated App Store waits for the answer. Apple documents only its performance test's threshold (about
    /// 700 ms); the simulator allows more so a loaded test machine does not turn answers into defaults.
    static let realtimeDeadline = TimeAmount.seconds(2)

    public func setRealtimeURL(_ p: SimSetRealtimeURL.Params) throws {
        if let url = p.url {
            guard let parsed = URL(string: url), ["http", "https"].contains(parsed.scheme ?? ""), parsed.host != nil, url.utf8.count <= 256
            else { throw RPCError.invalidParams("url must be an http or https URL of at most 256 characters", field: "url", reason: "invalidValue") }
        }
        try store.writer.write { db in
            if let url = p.url {
                try db.execute(
                    sql: "INSERT OR REPLACE INTO simRealtimeURL (environment, url) VALUES (?, ?)", arguments: [p.environment.rawValue, url])
            } else {
                try db.execute(sql: "DELETE FROM simRealtimeURL WHERE environment = ?", arguments: [p.environment.rawValue])
            }
        }
    }

    public func cancelIntent(_ p: SimCancelIntent.Params) async throws -> SimCancelIntent.Result {
        guard (2...35).contains(p.locale.utf8.count), p.locale.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") })
        else { throw RPCError.invalidParams("locale is a language tag such as en-US", field: "locale", reason: "invalidValue") }
        let (transaction, url, now) = try await store.writer.read { db -> (SimTransaction?, String?, Int64) in
            let t = try SimulatorStore.transaction(p.originalTransactionId, db: db)
            let url = try t.flatMap {
                try String.fetchOne(db, sql: "SELECT url FROM simRealtimeURL WHERE environment = ?", arguments: [$0.environment.rawValue])
            }
            return (t, url, try self.now(db))
        }
        guard let transaction, transaction.appleId == p.appleId, transaction.productType == .autoRenewable else {
            throw RPCError.notFound("no subscription \(p.originalTransactionId) of \(p.appleId)", reason: "unknownTransaction")
        }
        let requestIdentifier = UUID().uuidString.lowercased()
        let payload: [String: Any] = [
            "originalTransactionId": transaction.originalTransactionId, "appAppleId": 1_234_567_890, "productId": transaction.productId,
            "userLocale": p.locale, "requestIdentifier": requestIdentifier, "environment": transaction.environment.appleName,
            "signedDate": now,
        ]
        let signed = try pki.signedPayloads.sign(payload: Array(try JSONSerialization.data(withJSONObject: payload, options: [.sortedKeys])))
        guard let url else {
            return .init(requestIdentifier: requestIdentifier, signedPayload: signed, shown: .init(kind: "default", reason: "no realtime URL"))
        }
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: ["signedPayload": signed])))
        let shown: RetentionShown
        do {
            let response = try await HTTPClient.shared.execute(request, timeout: Self.realtimeDeadline)
            let body = Array(buffer: try await response.body.collect(upTo: 64 * 1024))
            shown =
                (200..<300).contains(Int(response.status.code)) ? Self.shown(body) : .init(kind: "default", reason: "HTTP \(response.status.code)")
        } catch {
            shown = .init(kind: "default", reason: "no answer in time")
        }
        return .init(requestIdentifier: requestIdentifier, signedPayload: signed, shown: shown)
    }

    /// What Apple shows for an answer: exactly one of the three choices, each with its message identifier (a UUID), else
    /// the default.
    static func shown(_ body: [UInt8]) -> RetentionShown {
        guard let answer = try? JSONValue(parsing: body), case .object(let fields) = answer else {
            return .init(kind: "default", reason: "not JSON")
        }
        let choices = ["message", "alternateProduct", "promotionalOffer"].filter { fields[$0].map { $0 != JSONValue.null } ?? false }
        guard choices.count == 1, let choice = fields[choices[0]], let message = choice["messageIdentifier"]?.stringValue,
            UUID(uuidString: message) != nil
        else { return .init(kind: "default", reason: "not exactly one choice with a messageIdentifier") }
        switch choices[0] {
        case "alternateProduct":
            guard let product = choice["productId"]?.stringValue, !product.isEmpty else { return .init(kind: "default", reason: "no productId") }
            return .init(kind: "alternateProduct", messageIdentifier: message, productId: product)
        case "promotionalOffer":
            let v1 = choice["promotionalOfferSignatureV1"]?["offerIdentifier"]?.stringValue
            let v2 = choice["promotionalOfferSignatureV2"]?.stringValue.flatMap(Self.offerIdentifier(jws:))
            guard let offer = v1 ?? v2 else { return .init(kind: "default", reason: "no offer signature") }
            return .init(kind: "promotionalOffer", messageIdentifier: message, offerIdentifier: offer)
        default:
            return .init(kind: "message", messageIdentifier: message)
        }
    }

    /// The `offerIdentifier` claim of a compact JWS (read, not verified: the purchase checks the offer when it is used).
    static func offerIdentifier(jws: String) -> String? {
        let parts = jws.split(separator: ".")
        guard parts.count == 3 else { return nil }
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        guard let data = Data(base64Encoded: base64), let claims = try? JSONValue(parsing: Array(data)) else { return nil }
        return claims["offerIdentifier"]?.stringValue
    }
}
