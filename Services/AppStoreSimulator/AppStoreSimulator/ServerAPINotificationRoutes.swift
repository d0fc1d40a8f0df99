import Foundation
import Hummingbird
import IAPProtocol

/// Get Notification History, Request a Test Notification and Get Test Notification Status, as Apple
/// documents them, from the notifications the simulator made and its send attempts.
extension AppStoreServerAPIEndpoint {
    /// How far back Notification History reaches (Apple: 180 days).
    static let historyWindowMs: Int64 = 180 * 86_400_000

    static let notificationTypes: Set<String> = [
        "CONSUMPTION_REQUEST", "DID_CHANGE_RENEWAL_PREF", "DID_CHANGE_RENEWAL_STATUS", "DID_FAIL_TO_RENEW", "DID_RENEW", "EXPIRED",
        "EXTERNAL_PURCHASE_TOKEN", "GRACE_PERIOD_EXPIRED", "OFFER_REDEEMED", "ONE_TIME_CHARGE", "PRICE_INCREASE", "REFUND",
        "REFUND_DECLINED", "REFUND_REVERSED", "RENEWAL_EXTENDED", "RENEWAL_EXTENSION", "REVOKE", "SUBSCRIBED", "TEST",
    ]

    func addNotificationRoutes(to router: Router<BasicRequestContext>, prefix: String, environment: SimEnvironment) {
        router.post(RouterPath("\(prefix)inApps/v1/notifications/history")) { request, _ -> Response in
            await self.respond(request) { bid, body in
                try self.notificationHistory(
                    body: body, paginationToken: Self.query(request)["paginationToken"]?.first, environment: environment, bid: bid)
            }
        }
        router.post(RouterPath("\(prefix)inApps/v1/notifications/test")) { request, _ -> Response in
            await self.respond(request) { bid in
                ["testNotificationToken": try self.simulator.api.apiRequestTestNotification(bundleId: bid, environment: environment)]
            }
        }
        router.get(RouterPath("\(prefix)inApps/v1/notifications/test/:token")) { request, context -> Response in
            await self.respond(request) { bid in
                let token = context.parameters.get("token") ?? ""
                guard token.contains("_"), UUID(uuidString: String(token.split(separator: "_")[0])) != nil else {
                    throw APIError.badRequest(4_000_020, "Invalid test notification token.")
                }
                guard let (n, attempts) = try self.simulator.api.apiTestNotification(token, bundleId: bid, environment: environment) else {
                    throw APIError(
                        status: .notFound, code: 4_040_008,
                        message: "Either the test notification token is expired or the notification and status are not yet available.")
                }
                return ["signedPayload": n.signedPayload, "sendAttempts": Self.attempts(attempts)]
            }
        }
    }

    static func attempts(_ attempts: [SimSendAttempt]) -> [[String: Any]] {
        attempts.map { ["attemptDate": $0.attemptDateMs, "sendAttemptResult": $0.result] }
    }

    /// Get Notification History: `startDate` and `endDate` required (ms; within 180 days; an end in the
    /// future is now), optional `notificationType` (+ `notificationSubtype`) or `transactionId` (not both),
    /// `onlyFailures`; 20 a page, `paginationToken` to go on.
    func notificationHistory(body: [UInt8], paginationToken: String?, environment: SimEnvironment, bid: String) throws -> [String: Any] {
        let object = try Self.object(body)
        guard let start = (object["startDate"] as? NSNumber)?.int64Value, start >= 0 else {
            throw APIError.badRequest(4_000_015, "Invalid start date.")
        }
        guard let requestedEnd = (object["endDate"] as? NSNumber)?.int64Value, requestedEnd >= 0 else {
            throw APIError.badRequest(4_000_016, "Invalid end date.")
        }
        guard start < requestedEnd else {
            throw APIError.badRequest(4_000_013, "Invalid request. The end date precedes the start date or the dates are the same.")
        }
        let now = try simulator.api.simulatedNow()
        guard start >= now - Self.historyWindowMs else {
            throw APIError.badRequest(4_000_012, "Invalid request. The start date is earlier than the allowed start date.")
        }
        let end = min(requestedEnd, now + 1)
        let type = object["notificationType"] as? String
        let subtype = object["notificationSubtype"] as? String
        let transactionId = object["transactionId"] as? String
        if let type, !Self.notificationTypes.contains(type) { throw APIError.badRequest(4_000_018, "Invalid notification type.") }
        if subtype != nil, type == nil { throw APIError.badRequest(4_000_018, "Invalid notification type.") }
        if type != nil, transactionId != nil {
            throw APIError.badRequest(4_000_019, "Invalid request. Only one of notificationType or transactionId may be supplied.")
        }
        var original: String?
        if let transactionId {
            original = try transaction(transactionId, environment: environment, bid: bid).originalTransactionId
        }
        let after = try paginationToken.map { try Self.position($0, orThrow: .badRequest(4_000_014, "Invalid pagination token.")) } ?? 0
        let rows = try simulator.api.apiNotifications(
            bundleId: bid, environment: environment, startMs: start, endMs: end, type: type, subtype: subtype, originalTransactionId: original,
            onlyFailures: object["onlyFailures"] as? Bool ?? false, afterSeq: after, limit: Self.pageSize + 1)
        let page = rows.prefix(Self.pageSize)
        var answer: [String: Any] = [
            "notificationHistory": page.map { ["signedPayload": $0.0.signedPayload, "sendAttempts": Self.attempts($0.1)] as [String: Any] },
            "hasMore": rows.count > page.count,
        ]
        if rows.count > page.count, let last = page.last { answer["paginationToken"] = Self.token(last.0.seq) }
        return answer
    }
}
