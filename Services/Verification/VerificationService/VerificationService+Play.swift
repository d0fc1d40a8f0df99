import Foundation
import IAPProtocol
import JSONRPC
import Logging
import PlayDeveloperAPI
import RPCTransport
import ServiceSupport

/// Google Play: purchase tokens checked with Google's Play Developer API (nothing on the device is trusted; the token is
/// only a name for Google to look up), for allow-listed package names only.
extension VerificationService {
    public func verifyPlayPurchase(_ p: PlayPurchaseReference) async throws(RPCError) -> VerifiedPlayPurchase {
        let (api, packageName) = try playAPI(p)
        let answer: JSONValue
        do {
            answer =
                p.kind == .product
                ? try await api.productPurchase(packageName: packageName, token: p.purchaseToken)
                : try await api.subscriptionPurchase(packageName: packageName, token: p.purchaseToken)
        } catch {
            throw playError(error)
        }
        guard let purchase = PlayPurchaseReading.read(answer, packageName: packageName, reference: p) else {
            throw RPCError.unavailable("Google's answer about the purchase could not be read", reason: "playAPIUnavailable")
        }
        if let wanted = p.productId, purchase.productId != wanted {
            throw RPCError.invalidReceipt(
                status: 21_003, reason: "productMismatch", detail: "the purchase token is for \(purchase.productId), not \(wanted)")
        }
        return purchase
    }

    public func acknowledgePlayPurchase(_ p: VerificationAcknowledgePlayPurchase.Params) async throws(RPCError) {
        let (api, packageName) = try playAPI(p.purchase)
        let r = p.purchase
        guard let productId = r.productId else {
            throw RPCError.invalidParams("productId is required to acknowledge", field: "productId", reason: "missingField")
        }
        do {
            switch r.kind {
            case .product:
                try await api.acknowledgeProduct(
                    packageName: packageName, productId: productId, token: r.purchaseToken, consume: p.consume ?? false)
            case .subscription:
                try await api.acknowledgeSubscription(packageName: packageName, subscriptionId: productId, token: r.purchaseToken)
            }
        } catch {
            throw playError(error)
        }
    }

    /// The client and the package name to ask about: the one given, if accepted, else the only one accepted.
    func playAPI(_ p: PlayPurchaseReference) throws(RPCError) -> (PlayDeveloperAPIClient, String) {
        try TokenGate.internal.check(p.internalToken, configured: configuration.internalToken)
        guard let api = configuration.playAPI else {
            throw RPCError(
                code: .unavailable, message: "the Play Developer API is not configured (--play-service-account)", reason: .playAPINotConfigured)
        }
        guard let packageName = p.packageName ?? (configuration.playPackageNames.count == 1 ? configuration.playPackageNames.first : nil) else {
            throw RPCError.invalidParams(
                "packageName is required: this server accepts \(configuration.playPackageNames.count) package names", field: "packageName",
                reason: "missingField")
        }
        guard configuration.playPackageNames.contains(packageName) else {
            throw RPCError.invalidReceipt(
                status: 21_003, reason: "packageNotAllowed", detail: "\(packageName) is not one of this server's --package-name")
        }
        return (api, packageName)
    }

    /// Google's answers as the suite's errors: an unknown or malformed token is notFound / invalidReceipt, a purchase in a
    /// state Google refuses the action for is a conflict, rate limits, outages and the network are unavailable (retryable),
    /// a refused service account is the operator's to fix.
    func playError(_ error: any Error) -> RPCError {
        guard let error = error as? PlayAPIError else { return .unavailable("the Play Developer API could not be reached") }
        switch error {
        case .api(404, let reason, let message), .api(410, let reason, let message):
            return .notFound("Google has no such purchase (\(message ?? "not found"))", reason: reason ?? "purchaseTokenNotFound")
        case .api(400, "invalidPurchaseState", let message):
            return .conflict("Google refused: \(message ?? "invalid purchase state")", reason: "invalidPurchaseState")
        case .api(400, let reason, let message):
            return .invalidReceipt(status: 21_002, reason: reason ?? "invalidPurchaseToken", detail: message ?? "Google refused the purchase token")
        case .api(let status, _, let message) where status == 401 || status == 403:
            // Google's words stay in this log: the answer travels back to the app that redeemed.
            logger.error("the Play Developer API refused the service account", metadata: ["status": "\(status)", "message": "\(message ?? "")"])
            return .internalError("the Play Developer API refused this server's service account (see verification's log)")
        case .api(let status, _, _):
            return .unavailable("the Play Developer API answered HTTP \(status); retry later", reason: "playAPIUnavailable")
        case .unauthorized(let why):
            logger.error("Google's token endpoint refused the service account", metadata: ["answer": "\(why)"])
            return .internalError("Google's token endpoint refused this server's service account (see verification's log)")
        case .badKeyFile:
            return .internalError("the Play service account's key file is unusable (see verification's start-up)")
        case .malformedResponse:
            return .unavailable("the Play Developer API answered something that is not JSON", reason: "playAPIUnavailable")
        case .transport:
            return .unavailable("the Play Developer API could not be reached", reason: "playAPIUnavailable")
        }
    }
}

/// Reads Google's ProductPurchaseV2 and SubscriptionPurchaseV2 into the suite's one shape.
enum PlayPurchaseReading {
    static func read(_ json: JSONValue, packageName: String, reference p: PlayPurchaseReference) -> VerifiedPlayPurchase? {
        p.kind == .product ? product(json, packageName, p) : subscription(json, packageName, p)
    }

    static func product(_ json: JSONValue, _ packageName: String, _ p: PlayPurchaseReference) -> VerifiedPlayPurchase? {
        guard let item = json["productLineItem"]?.arrayValue?.first, let productId = item["productId"]?.stringValue else { return nil }
        let offer = item["productOfferDetails"]
        let state = json["purchaseStateContext"]?["purchaseState"]?.stringValue ?? "PURCHASE_STATE_UNSPECIFIED"
        return VerifiedPlayPurchase(
            packageName: packageName, productId: productId, purchaseToken: p.purchaseToken, kind: .product,
            orderId: json["orderId"]?.stringValue, state: state, entitles: state == "PURCHASED",
            acknowledged: json["acknowledgementState"]?.stringValue == "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED",
            consumed: offer?["consumptionState"]?.stringValue == "CONSUMPTION_STATE_CONSUMED",
            quantity: Int(offer?["quantity"]?.intValue ?? 1), refundableQuantity: offer?["refundableQuantity"]?.intValue.map { Int($0) },
            obfuscatedExternalAccountId: json["obfuscatedExternalAccountId"]?.stringValue, test: json["testPurchaseContext"] != nil,
            purchaseTimeMs: json["purchaseCompletionTime"]?.stringValue.flatMap(GoogleDateTime.milliseconds), expiryTimeMs: nil, autoRenewing: nil,
            basePlanId: nil, linkedPurchaseToken: nil)
    }

    static func subscription(_ json: JSONValue, _ packageName: String, _ p: PlayPurchaseReference) -> VerifiedPlayPurchase? {
        guard let item = currentItem(json["lineItems"]?.arrayValue ?? [], named: p.productId),
            let productId = item["productId"]?.stringValue, let state = json["subscriptionState"]?.stringValue
        else { return nil }
        // A plan replaced by an upgrade or downgrade (a new purchase token linking this one) reads as canceled with its old
        // expiry until then, yet gives no access: the replacement does (`canceledStateContext.replacementCancellation`).
        // Before 2026-11-30 it counted as access, and a question about it (the sweep, a push) gave the old plan back.
        let replaced = json["canceledStateContext"]?["replacementCancellation"] != nil
        let entitles =
            ["SUBSCRIPTION_STATE_ACTIVE", "SUBSCRIPTION_STATE_CANCELED", "SUBSCRIPTION_STATE_IN_GRACE_PERIOD"].contains(state) && !replaced
        return VerifiedPlayPurchase(
            packageName: packageName, productId: productId, purchaseToken: p.purchaseToken, kind: .subscription,
            orderId: item["latestSuccessfulOrderId"]?.stringValue, state: state, entitles: entitles,
            acknowledged: json["acknowledgementState"]?.stringValue == "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED", consumed: nil, quantity: 1,
            refundableQuantity: nil, obfuscatedExternalAccountId: json["externalAccountIdentifiers"]?["obfuscatedExternalAccountId"]?.stringValue,
            test: json["testPurchase"] != nil, purchaseTimeMs: json["startTime"]?.stringValue.flatMap(GoogleDateTime.milliseconds),
            expiryTimeMs: item["expiryTime"]?.stringValue.flatMap(GoogleDateTime.milliseconds),
            autoRenewing: item["autoRenewingPlan"]?["autoRenewEnabled"]?.boolValue,
            basePlanId: item["offerDetails"]?["basePlanId"]?.stringValue, linkedPurchaseToken: json["linkedPurchaseToken"]?.stringValue)
    }

    /// The line item that holds the access: the one ending last, the named one among equals (a subscription with add-ons
    /// lists one per product). After a DEFERRED plan change the token lists the replaced plan's item, which holds the
    /// access until it expires, and the new plan's, without an expiry until it takes over (then the replaced one's is in
    /// the past); Google documents no order. Before 2026-11-30 the named item, else the first, was read: a downgrade
    /// redeemed under its new product lost the rest of the paid period, and a push after the switch could read the old item.
    static func currentItem(_ items: [JSONValue], named productId: String?) -> JSONValue? {
        func expiry(_ item: JSONValue) -> Int64? { item["expiryTime"]?.stringValue.flatMap(GoogleDateTime.milliseconds) }
        let named = items.first { $0["productId"]?.stringValue == productId }
        let dated = items.compactMap { item in expiry(item).map { (item: item, ms: $0) } }
        guard let latest = dated.max(by: { $0.ms < $1.ms }) else { return named ?? items.first }
        if let named, let ms = expiry(named), ms >= latest.ms { return named }
        return latest.item
    }

}
