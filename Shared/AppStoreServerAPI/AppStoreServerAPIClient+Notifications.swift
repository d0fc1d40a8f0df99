import Foundation
import IAPProtocol
import JSONRPC
import Receipts

/// One send attempt of a notification (`attemptDate`, `sendAttemptResult`: SUCCESS, TIMED_OUT, ...).
public struct NotificationSendAttempt: Sendable, Equatable {
    public let attemptDateMs: Int64
    public let result: String
}

/// A notification from Get Notification History or Get Test Notification Status: the signed payload and
/// the transaction and renewal info inside it verified, and Apple's send attempts.
public struct NotificationRecord: Sendable, Equatable {
    public let notification: VerifiedSignedData
    public let sendAttempts: [NotificationSendAttempt]
}

/// Get Notification History's body (Apple's NotificationHistoryRequest).
public struct NotificationHistoryQuery: Sendable, Equatable {
    public var startDateMs: Int64
    public var endDateMs: Int64
    public var notificationType: String?
    public var notificationSubtype: String?
    /// Notifications about this customer's purchase; not together with `notificationType`.
    public var transactionId: String?
    /// Only notifications that never reached the server.
    public var onlyFailures: Bool?

    public init(startDateMs: Int64, endDateMs: Int64) {
        self.startDateMs = startDateMs
        self.endDateMs = endDateMs
    }

    var json: JSONValue {
        var body: [String: JSONValue] = ["startDate": .int(startDateMs), "endDate": .int(endDateMs)]
        if let notificationType { body["notificationType"] = .string(notificationType) }
        if let notificationSubtype { body["notificationSubtype"] = .string(notificationSubtype) }
        if let transactionId { body["transactionId"] = .string(transactionId) }
        if let onlyFailures { body["onlyFailures"] = .bool(onlyFailures) }
        return .object(body)
    }
}

/// One page of notification history and the token of the next.
public struct NotificationHistoryPage: Sendable, Equatable {
    public let records: [NotificationRecord]
    public let hasMore: Bool
    public let paginationToken: String?
}

extension AppStoreServerAPIClient {
    func base(_ environment: AppleEnvironment) -> String {
        environment == .production ? configuration.productionURL : configuration.sandboxURL
    }

    /// Get Notification History: one page (20) of the notifications Apple sent (or tried to) in a date range.
    public func notificationHistory(_ environment: AppleEnvironment, _ query: NotificationHistoryQuery, paginationToken: String? = nil)
        async throws -> NotificationHistoryPage
    {
        let url = base(environment) + "/inApps/v1/notifications/history" + Self.queryString(paginationToken.map { [("paginationToken", $0)] } ?? [])
        guard let body = try await send(.POST, url, body: query.json) else { throw AppStoreAPIError.malformedResponse }
        var records: [NotificationRecord] = []
        for item in body["notificationHistory"]?.arrayValue ?? [] {
            records.append(try await record(item))
        }
        return NotificationHistoryPage(
            records: records, hasMore: body["hasMore"]?.boolValue ?? false, paginationToken: body["paginationToken"]?.stringValue)
    }

    /// Every page of notification history from `paginationToken` on, fetched as iterated.
    public func notificationHistoryPages(_ environment: AppleEnvironment, _ query: NotificationHistoryQuery, paginationToken: String? = nil)
        -> NotificationHistoryPages
    {
        NotificationHistoryPages(client: self, environment: environment, query: query, start: paginationToken)
    }

    /// Request a Test Notification: Apple sends a TEST notification to the configured URL; its token.
    public func requestTestNotification(_ environment: AppleEnvironment) async throws -> String {
        guard let token = try await send(.POST, base(environment) + "/inApps/v1/notifications/test")?["testNotificationToken"]?.stringValue
        else { throw AppStoreAPIError.malformedResponse }
        return token
    }

    /// Get Test Notification Status: the TEST notification and how its delivery went.
    public func testNotificationStatus(_ environment: AppleEnvironment, token: String) async throws -> NotificationRecord {
        guard let body = try await send(.GET, base(environment) + "/inApps/v1/notifications/test/" + Self.escaped(token)) else {
            throw AppStoreAPIError.malformedResponse
        }
        return try await record(body)
    }

    /// `{signedPayload, sendAttempts}`: the payload verified (with this app's bundle id) and the transaction
    /// and renewal info inside it verified too.
    private func record(_ item: JSONValue) async throws -> NotificationRecord {
        guard let signed = item["signedPayload"]?.stringValue else { throw AppStoreAPIError.malformedResponse }
        let notification = try await verifiedData(signed)
        let section = ["data", "summary", "externalPurchaseToken"].compactMap { notification.payload[$0] }.first
        guard section?["bundleId"]?.stringValue == credentials.bundleId else { throw AppStoreAPIError.bundleMismatch }
        if let transaction = section?["signedTransactionInfo"]?.stringValue { _ = try await verified(transaction) }
        if let renewal = section?["signedRenewalInfo"]?.stringValue { _ = try await verifiedData(renewal) }
        let attempts = (item["sendAttempts"]?.arrayValue ?? []).map {
            NotificationSendAttempt(attemptDateMs: $0["attemptDate"]?.millisecondsValue ?? 0, result: $0["sendAttemptResult"]?.stringValue ?? "OTHER")
        }
        return NotificationRecord(notification: notification, sendAttempts: attempts)
    }
}

/// Pages of notification history, fetched one at a time as they are iterated; `paginationToken` of the last
/// page fetched is where a later run goes on.
public struct NotificationHistoryPages: AsyncSequence, Sendable {
    public typealias Element = NotificationHistoryPage
    let client: AppStoreServerAPIClient
    let environment: AppleEnvironment
    let query: NotificationHistoryQuery
    let start: String?

    public struct AsyncIterator: AsyncIteratorProtocol {
        let pages: NotificationHistoryPages
        var token: String?
        var done = false

        public mutating func next() async throws -> NotificationHistoryPage? {
            guard !done else { return nil }
            let page = try await pages.client.notificationHistory(pages.environment, pages.query, paginationToken: token)
            token = page.paginationToken
            done = !page.hasMore || page.paginationToken == nil
            return page
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(pages: self, token: start) }
}
