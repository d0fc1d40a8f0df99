import Foundation
import IAPProtocol
import JSONRPC
import PlayDeveloperAPI
import ServiceSupport

/// Google Play's real-time developer notifications, as Pub/Sub pushes them: the push's OIDC token verified as Google
/// documents (RS256 by Google's keys, issuer, audience, the push service account's verified email, age), then the
/// message read. What the notification says is only news that a purchase changed: fulfillment asks Google for the
/// purchase's state before acting on it.
extension VerificationService {
    public func verifyPlayPush(_ p: PlayPushDelivery) async throws(RPCError) -> VerifiedPlayPush {
        try TokenGate.internal.check(p.internalToken, configured: configuration.internalToken)
        guard let verifier = configuration.playPush else {
            throw RPCError(
                code: .unavailable, message: "Google Play pushes are not configured (--play-push-audience, --play-push-email)",
                reason: "playPushNotConfigured", retryable: false)
        }
        do {
            _ = try await verifier.verify(authorization: p.authorization)
        } catch {
            if case .certsUnavailable(let why) = error {
                logger.warning("Google's certs could not be fetched", metadata: ["certsURL": "\(verifier.certsURL)", "error": "\(why)"])
                throw RPCError.unavailable("Google's signing keys could not be fetched; Pub/Sub sends the push again", reason: "playCertsUnavailable")
            }
            logger.notice("a Google Play push's token was refused", metadata: ["reason": "\(error)"])
            throw RPCError.invalidReceipt(status: 21_003, reason: "invalidPushToken", detail: "the push's OIDC token was refused (\(error))")
        }
        let push = try PlayPushReading.read(p.body)
        guard configuration.playPackageNames.contains(push.packageName) else {
            throw RPCError.invalidReceipt(
                status: 21_003, reason: "packageNotAllowed", detail: "\(push.packageName) is not one of this server's --package-name")
        }
        return push
    }
}

extension VerificationService {
    /// voidedpurchases.list for each accepted package name in turn (sorted), a page at a time: the opaque page token says
    /// which package and which of Google's pages comes next.
    public func playVoidedPurchases(_ p: VerificationPlayVoidedPurchases.Params) async throws(RPCError)
        -> VerificationPlayVoidedPurchases.Result
    {
        try TokenGate.internal.check(p.internalToken, configured: configuration.internalToken)
        guard let api = configuration.playAPI else {
            throw RPCError(
                code: .unavailable, message: "the Play Developer API is not configured (--play-service-account)", reason: .playAPINotConfigured)
        }
        let packages = configuration.playPackageNames.sorted()
        var cursor = (package: 0, google: String?.none)
        if let token = p.pageToken {
            let parts = token.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            guard let index = parts.first.flatMap({ Int($0) }), packages.indices.contains(index) else {
                throw RPCError.invalidParams("pageToken is not one this server gave", field: "pageToken", reason: "invalidValue")
            }
            cursor = (index, parts.count == 2 && !parts[1].isEmpty ? String(parts[1]) : nil)
        }
        guard packages.indices.contains(cursor.package) else { return .init(voidedPurchases: [], nextPageToken: nil) }
        let packageName = packages[cursor.package]
        let answer: JSONValue
        do {
            answer = try await api.voidedPurchases(packageName: packageName, startTimeMs: p.startTimeMs, pageToken: cursor.google)
        } catch {
            throw playError(error)
        }
        let voided = (answer["voidedPurchases"]?.arrayValue ?? []).compactMap { item -> PlayVoidedPurchase? in
            guard let token = item["purchaseToken"]?.stringValue, let at = item["voidedTimeMillis"]?.stringValue.flatMap({ Int64($0) }) else {
                return nil
            }
            return PlayVoidedPurchase(
                packageName: packageName, purchaseToken: token, orderId: item["orderId"]?.stringValue, voidedTimeMs: at,
                voidedQuantity: item["voidedQuantity"]?.intValue.map { Int($0) })
        }
        let next: String? =
            if let google = answer["tokenPagination"]?["nextPageToken"]?.stringValue, !google.isEmpty {
                "\(cursor.package):\(google)"
            } else if cursor.package + 1 < packages.count {
                "\(cursor.package + 1):"
            } else {
                nil
            }
        return .init(voidedPurchases: voided, nextPageToken: next)
    }
}

/// Reads a Pub/Sub push body (`{message: {data, messageId, publishTime, attributes}, subscription}`) and the
/// DeveloperNotification in its `data`.
enum PlayPushReading {
    static func read(_ body: String) throws(RPCError) -> VerifiedPlayPush {
        func refuse(_ why: String) -> RPCError {
            RPCError.invalidReceipt(status: 21_002, reason: "invalidPush", detail: "not a Pub/Sub push of a developer notification: \(why)")
        }
        guard body.utf8.count <= 64 << 10, let envelope = try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any],
            let message = envelope["message"] as? [String: Any]
        else { throw refuse("no message") }
        // Pub/Sub's message ids are decimal numbers.
        guard let messageId = (message["messageId"] ?? message["message_id"]) as? String, (1...64).contains(messageId.utf8.count),
            messageId.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 })
        else { throw refuse("no messageId (Pub/Sub's: digits)") }
        guard let data = message["data"] as? String, let decoded = Data(base64Encoded: data),
            let notification = try? JSONSerialization.jsonObject(with: decoded) as? [String: Any],
            let packageName = notification["packageName"] as? String
        else { throw refuse("data is not a base64 DeveloperNotification with its packageName") }
        var push = VerifiedPlayPush(
            messageId: messageId, subscription: envelope["subscription"] as? String,
            publishTimeMs: ((message["publishTime"] ?? message["publish_time"]) as? String).flatMap(GoogleDateTime.milliseconds),
            packageName: packageName, eventTimeMs: millis(notification["eventTimeMillis"]), kind: .other)
        if let sub = notification["subscriptionNotification"] as? [String: Any] {
            push.kind = .subscription
            push.notificationType = (sub["notificationType"] as? NSNumber)?.intValue
            push.purchaseToken = sub["purchaseToken"] as? String
            push.productId = sub["subscriptionId"] as? String
        } else if let one = notification["oneTimeProductNotification"] as? [String: Any] {
            push.kind = .oneTimeProduct
            push.notificationType = (one["notificationType"] as? NSNumber)?.intValue
            push.purchaseToken = one["purchaseToken"] as? String
            push.productId = one["sku"] as? String
        } else if let voided = notification["voidedPurchaseNotification"] as? [String: Any] {
            push.kind = .voidedPurchase
            push.purchaseToken = voided["purchaseToken"] as? String
            push.orderId = voided["orderId"] as? String
            push.productType = (voided["productType"] as? NSNumber)?.intValue
            push.refundType = (voided["refundType"] as? NSNumber)?.intValue
        } else if notification["testNotification"] != nil {
            push.kind = .test
        }
        if push.kind != .test, push.kind != .other, push.purchaseToken?.isEmpty ?? true { throw refuse("no purchaseToken") }
        return push
    }

    /// Google sends `eventTimeMillis` as a string in its examples; a number is read too.
    static func millis(_ value: Any?) -> Int64? {
        if let text = value as? String { return Int64(text) }
        return (value as? NSNumber)?.int64Value
    }
}
