import AsyncHTTPClient
import Crypto
import Foundation
import GRDB
import IAPProtocol
import JSONRPC
import NIOCore
import NIOPosix
import NIOSSL
import Receipts

/// Apple's Retention Messaging, the App Store's side: when a customer looks at cancelling, Apple POSTs a signed
/// `RealtimeRequestBody {signedPayload}` to the app's realtime URL and shows what the answer chooses (exactly one of
/// `message`, `alternateProduct`, `promotionalOffer`), or the default message when there is no URL, no answer in time or
/// no valid choice. The decoded payload: originalTransactionId, appAppleId, productId, userLocale, requestIdentifier,
/// environment, signedDate (docs: retentionmessaging/decodedrealtimerequestbody). Apple shows only approved messages, and
/// an offer only with a signature made with the developer's offer key: both are checked here.
extension AppStoreSimulator {
    /// How long the simulated App Store waits for the answer. Apple documents only its performance test's threshold (about
    /// 700 ms); the simulator allows more so a loaded test machine does not turn answers into defaults.
    public static let defaultRealtimeDeadline = TimeAmount.seconds(2)

    public func setRealtimeURL(_ p: SimSetRealtimeURL.Params) throws {
        if let url = p.url, !Self.acceptsRealtimeURL(url) {
            throw RPCError.invalidParams(
                "url must be an https URL of at most 256 characters, or http to this machine", field: "url", reason: "invalidValue")
        }
        try store.writer.write { db in try Self.setRealtimeURL(p.url, environment: p.environment, db: db) }
    }

    static func setRealtimeURL(_ url: String?, environment: SimEnvironment, db: Database) throws {
        if let url {
            try db.execute(sql: "INSERT OR REPLACE INTO simRealtimeURL (environment, url) VALUES (?, ?)", arguments: [environment.rawValue, url])
        } else {
            try db.execute(sql: "DELETE FROM simRealtimeURL WHERE environment = ?", arguments: [environment.rawValue])
        }
    }

    public func reviewMessaging(_ p: SimReviewMessaging.Params) async throws -> SimReviewMessaging.Result {
        guard ["APPROVED", "REJECTED", "PENDING"].contains(p.state) else {
            throw RPCError.invalidParams("state is APPROVED, REJECTED or PENDING", field: "state", reason: "invalidValue")
        }
        guard p.identifier.utf8.count == 36, UUID(uuidString: p.identifier) != nil else {
            throw RPCError.invalidParams("identifier is a message's or an image's UUID", field: "identifier", reason: "invalidValue")
        }
        let reviewed = try await blocking {
            try self.store.writer.write { db in
                var changed = 0
                for (table, column) in [("simMessage", "messageIdentifier"), ("simImage", "imageIdentifier")] {
                    try db.execute(sql: "UPDATE \(table) SET state = ? WHERE \(column) = ?", arguments: [p.state, p.identifier.lowercased()])
                    changed += db.changesCount
                }
                return changed
            }
        }
        guard reviewed > 0 else { throw RPCError.notFound("no message or image \(p.identifier) was uploaded", reason: "unknownMessage") }
        return .init(reviewed: reviewed)
    }

    public func cancelIntent(_ p: SimCancelIntent.Params) async throws -> SimCancelIntent.Result {
        guard (2...35).contains(p.locale.utf8.count), p.locale.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") })
        else { throw RPCError.invalidParams("locale is a language tag such as en-US", field: "locale", reason: "invalidValue") }
        let (transaction, url) = try await blocking {
            try self.store.writer.read { db -> (SimTransaction?, String?) in
                let t = try SimulatorStore.transaction(p.originalTransactionId, db: db)
                let url = try t.flatMap {
                    try String.fetchOne(db, sql: "SELECT url FROM simRealtimeURL WHERE environment = ?", arguments: [$0.environment.rawValue])
                }
                return (t, url)
            }
        }
        guard let transaction, transaction.appleId == p.appleId, transaction.productType == .autoRenewable else {
            throw RPCError.notFound("no subscription \(p.originalTransactionId) of \(p.appleId)", reason: "unknownTransaction")
        }
        let sent = try await sendRealtimeRequest(transaction, locale: p.locale, url: url, appAppleId: p.appAppleId ?? Self.appAppleId)
        return .init(requestIdentifier: sent.requestIdentifier, signedPayload: sent.signedPayload, shown: sent.shown)
    }

    /// One realtime request as Apple sends it, what the customer was shown (recorded), how long the answer took, and
    /// Apple's `SendAttemptResult` for it.
    struct RealtimeAttempt: Sendable {
        var requestIdentifier: String
        var signedPayload: String
        var shown: RetentionShown
        var latencyMs: Int
        var sendAttemptResult: String
    }

    /// The app Apple ID of the simulated app (what Production notifications and realtime requests name).
    static let appAppleId: Int64 = 1_234_567_890

    func sendRealtimeRequest(_ transaction: SimTransaction, locale: String, url: String?, appAppleId: Int64 = appAppleId) async throws
        -> RealtimeAttempt
    {
        let requestIdentifier = UUID().uuidString.lowercased()
        let now = try await blocking { try self.store.writer.read { db in try self.now(db) } }
        let payload: [String: Any] = [
            "originalTransactionId": transaction.originalTransactionId, "appAppleId": appAppleId, "productId": transaction.productId,
            "userLocale": locale, "requestIdentifier": requestIdentifier, "environment": transaction.environment.appleName,
            "signedDate": now,
        ]
        let signed = try pki.signedPayloads.sign(payload: Array(try JSONSerialization.data(withJSONObject: payload, options: [.sortedKeys])))
        var attempt = RealtimeAttempt(
            requestIdentifier: requestIdentifier, signedPayload: signed, shown: .init(kind: "default", reason: "no realtime URL"), latencyMs: 0,
            sendAttemptResult: "OTHER")
        if let url {
            var request = HTTPClientRequest(url: url)
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: ["signedPayload": signed])))
            let started = ContinuousClock.now
            do {
                let response = try await courier.http.execute(request, timeout: realtimeDeadline)
                let body = Array(buffer: try await response.body.collect(upTo: 64 * 1024))
                if (200..<300).contains(Int(response.status.code)) {
                    attempt.shown = try await checkedShown(shown(body, transaction: transaction), transaction: transaction, locale: locale)
                    attempt.sendAttemptResult = "SUCCESS"
                } else {
                    attempt.shown = .init(kind: "default", reason: "HTTP \(response.status.code)")
                    attempt.sendAttemptResult = "UNSUCCESSFUL_HTTP_RESPONSE_CODE"
                }
            } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout || error == .connectTimeout {
                attempt.shown = .init(kind: "default", reason: "no answer in time")
                attempt.sendAttemptResult = "TIMED_OUT"
            } catch is NIOSSLError {
                attempt.shown = .init(kind: "default", reason: "TLS failed")
                attempt.sendAttemptResult = "TLS_ISSUE"
            } catch {
                attempt.shown = .init(kind: "default", reason: "no answer")
                attempt.sendAttemptResult = "NO_RESPONSE"
            }
            let elapsed = ContinuousClock.now - started
            attempt.latencyMs = Int(elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000)
        }
        if attempt.shown.kind == "default" {
            attempt.shown.messageIdentifier = try await defaultMessage(transaction, locale: locale)
        }
        let shown = String(decoding: try JSONEncoder().encode(attempt.shown), as: UTF8.self)
        let requestId = attempt.requestIdentifier
        try await blocking {
            try self.store.writer.write { db in
                try db.execute(
                    sql:
                        "INSERT INTO simRetentionShown (requestIdentifier, originalTransactionId, environment, shown, shownAtMs) VALUES (?, ?, ?, ?, ?)",
                    arguments: [requestId, transaction.originalTransactionId, transaction.environment.rawValue, shown, now])
            }
        }
        return attempt
    }

    /// Apple shows a choice only with an approved message (and approved images), and an offer only with a valid signature.
    func checkedShown(_ shown: RetentionShown, transaction: SimTransaction, locale: String) async throws -> RetentionShown {
        guard shown.kind != "default", let message = shown.messageIdentifier?.lowercased() else { return shown }
        let (state, images) = try await blocking {
            try self.store.writer.read { db in
                (
                    try String.fetchOne(
                        db, sql: "SELECT state FROM simMessage WHERE environment = ? AND bundleId = ? AND messageIdentifier = ?",
                        arguments: [transaction.environment.rawValue, transaction.bundleId, message]),
                    try Self.imageStates(message, environment: transaction.environment, bundleId: transaction.bundleId, db: db)
                )
            }
        }
        guard state == "APPROVED", images.allSatisfy({ $0 == "APPROVED" }) else {
            return .init(kind: "default", reason: "message \(message) is not approved")
        }
        // Apple: only text-based messages may carry images; an alternate product's or an offer's may not.
        if shown.kind != "message", !images.isEmpty { return .init(kind: "default", reason: "a \(shown.kind) message may not carry an image") }
        if shown.kind == "promotionalOffer", shown.offerIdentifier == nil {
            return .init(kind: "default", reason: "the offer's signature is not valid for this subscription")
        }
        return shown
    }

    /// The review states of the images a message shows (none: a text-only message).
    static func imageStates(_ message: String, environment: SimEnvironment, bundleId: String, db: Database) throws -> [String] {
        try String.fetchAll(
            db,
            sql: """
                SELECT i.state FROM simMessageImage m JOIN simImage i USING (environment, bundleId, imageIdentifier)
                WHERE m.environment = ? AND m.bundleId = ? AND m.messageIdentifier = ?
                """, arguments: [environment.rawValue, bundleId, message])
    }

    /// An environment's realtime URL as the simulator takes it: https (Apple's rule) of at most 256 characters, or, for
    /// tests and the development stack, http to this machine.
    static func acceptsRealtimeURL(_ url: String) -> Bool {
        guard url.utf8.count <= 256, let parsed = URL(string: url), let host = parsed.host else { return false }
        return parsed.scheme == "https" || (parsed.scheme == "http" && ["127.0.0.1", "localhost", "::1"].contains(host))
    }

    /// The default message configured for the product and locale (Configure Default Message), if any.
    func defaultMessage(_ transaction: SimTransaction, locale: String) async throws -> String? {
        try await blocking {
            try self.store.writer.read { db in
                try String.fetchOne(
                    db,
                    sql: "SELECT messageIdentifier FROM simDefaultMessage WHERE environment = ? AND bundleId = ? AND productId = ? AND locale = ?",
                    arguments: [
                        transaction.environment.rawValue, transaction.bundleId, transaction.productId,
                        locale.replacingOccurrences(of: "_", with: "-"),
                    ])
            }
        }
    }

    /// The simulator's database work off the cooperative threads (as its other handlers run it): GRDB's async API waits
    /// for a reader on the cooperative pool, and the HTTP endpoint's synchronous reads there could then hold every
    /// thread an awaiting read needs to finish (a deadlock seen under `iap-bench retention`).
    func blocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await NIOThreadPool.singleton.runIfActive(body)
    }

    /// What Apple shows for an answer: exactly one of the three choices, each with its message identifier (a UUID), else
    /// the default. An offer's `offerIdentifier` is kept only when its signature verifies (`verifiedOffer`).
    func shown(_ body: [UInt8], transaction: SimTransaction) -> RetentionShown {
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
            return .init(kind: "promotionalOffer", messageIdentifier: message, offerIdentifier: verifiedOffer(choice, transaction: transaction))
        default:
            return .init(kind: "message", messageIdentifier: message)
        }
    }

    /// The offer id of a promotional offer signed with the developer's offer key (`sim.offerKey`) for this app and
    /// subscription, v2 (a JWS for the `promotional-offer` audience) or v1 (Apple's original signature); nil when neither
    /// verifies.
    func verifiedOffer(_ choice: JSONValue, transaction: SimTransaction) -> String? {
        let key = offerKey
        if let jws = choice["promotionalOfferSignatureV2"]?.stringValue {
            guard let (_, claims) = PromotionalOffer.verifiedClaims(jws, key: { $0 == key.keyId ? key.privateKey.publicKey : nil }),
                claims["aud"]?.stringValue == "promotional-offer", claims["bid"]?.stringValue == transaction.bundleId,
                claims["productId"]?.stringValue == transaction.productId,
                claims["transactionId"].map({ $0.stringValue == transaction.originalTransactionId }) ?? true
            else { return nil }
            return claims["offerIdentifier"]?.stringValue
        }
        guard let v1 = choice["promotionalOfferSignatureV1"], v1["keyId"]?.stringValue == key.keyId,
            let signature = v1["encodedSignature"]?.stringValue, v1["productId"]?.stringValue == transaction.productId,
            let offer = v1["offerIdentifier"]?.stringValue, let nonce = v1["nonce"]?.stringValue, let timestamp = v1["timestamp"]?.intValue
        else { return nil }
        let message = PromotionalOffer.message(
            bundleId: transaction.bundleId, keyId: key.keyId, productId: transaction.productId, offerId: offer,
            appAccountToken: v1["appAccountToken"]?.stringValue ?? "", nonce: nonce, timestamp: timestamp)
        return PromotionalOffer.isValidSignature(signature, message: message, key: key.privateKey.publicKey) ? offer : nil
    }
}
