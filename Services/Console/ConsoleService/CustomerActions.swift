import Foundation
import Hummingbird
import IAPProtocol
import JSONRPC
import RPCTransport

/// One action on a customer as a form asks for it, checked before the confirmation page and again before it is done.
struct CustomerAction: Sendable, Equatable {
    enum Kind: String, Sendable {
        case giveCoins = "give-coins", takeCoins = "take-coins", revoke, extend, retry, dismiss, signOut = "sign-out", grantOrder = "grant-order"
    }
    var kind: Kind
    var reason: String
    var amount: Int64 = 0
    var environment: AccountScope = .production
    var transactionId = ""
    var days = 0
    var notificationUUID = ""
    var orderId = ""

    /// The button's label: the action's name.
    var label: String {
        switch kind {
        case .giveCoins: "Give coins"
        case .takeCoins: "Take coins back"
        case .revoke: "Revoke"
        case .extend: "Extend"
        case .retry: "Retry"
        case .dismiss: "Dismiss"
        case .signOut: "Sign out of all devices"
        case .grantOrder: "Grant order"
        }
    }

    var summary: String {
        switch kind {
        case .giveCoins: "Give \(amount) coins (\(environment.rawValue)) as a ledger adjustment."
        case .takeCoins: "Take back \(amount) coins (\(environment.rawValue)) as a ledger adjustment."
        case .revoke: "Revoke purchase \(transactionId): its coins are taken back (what was spent becomes debt) or its access removed."
        case .extend: "Extend subscription \(transactionId) by \(days) days, at Apple and here."
        case .retry: "Process notification \(notificationUUID) again now."
        case .dismiss: "Set notification \(notificationUUID) aside for good: it is not processed again."
        case .signOut: "End every session of this customer: each device must sign in again."
        case .grantOrder: "Grant the purchases of Apple order \(orderId) to this customer, as their own redeem would."
        }
    }

    /// The fields that travel from the confirmation page to the action.
    var fields: [(String, String)] {
        var out = [("action", kind.rawValue), ("reason", reason)]
        switch kind {
        case .giveCoins, .takeCoins: out += [("amount", "\(amount)"), ("environment", environment.rawValue)]
        case .revoke, .extend: out += [("transactionId", transactionId), ("days", "\(days)")]
        case .retry, .dismiss: out += [("notificationUUID", notificationUUID)]
        case .signOut: break
        case .grantOrder: out += [("orderId", orderId)]
        }
        return out
    }

    struct Invalid: Error { let detail: String }

    /// The action a form names, or why it cannot be done.
    static func parse(_ form: [String: String]) throws(Invalid) -> CustomerAction {
        guard let kind = form["action"].flatMap(Kind.init(rawValue:)) else { throw Invalid(detail: "unknown action") }
        let reason = (form["reason"] ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        guard !reason.isEmpty, reason.utf8.count <= 500 else { throw Invalid(detail: "a reason (1-500 bytes) is required") }
        var action = CustomerAction(kind: kind, reason: reason)
        switch kind {
        case .giveCoins, .takeCoins:
            guard let amount = form["amount"].flatMap({ Int64($0) }), (1...CoinLimits.maxBalance).contains(amount) else {
                throw Invalid(detail: "coins must be a whole number from 1 to \(CoinLimits.maxBalance)")
            }
            guard let scope = AccountScope(rawValue: form["environment"] ?? "Production") else { throw Invalid(detail: "unknown environment") }
            action.amount = amount
            action.environment = scope
        case .revoke, .extend:
            let id = form["transactionId"] ?? ""
            let apple = (1...32).contains(id.count) && id.allSatisfy({ $0.isASCII && $0.isNumber })
            // Google Play's order ids can be revoked here too; extensions are Apple's (Extend a Subscription Renewal Date).
            let play =
                kind == .revoke && id.hasPrefix("GPA.") && id.count <= 64 && id.allSatisfy({ $0.isASCII && ($0.isNumber || "GPA.-".contains($0)) })
            guard apple || play else {
                throw Invalid(
                    detail: kind == .revoke ? "transaction ids are 1-32 digits, or a Google Play order id (GPA.)" : "transaction ids are 1-32 digits")
            }
            action.transactionId = id
            if kind == .extend {
                guard let days = form["days"].flatMap({ Int($0) }), (1...90).contains(days) else { throw Invalid(detail: "days must be 1-90") }
                action.days = days
            }
        case .retry, .dismiss:
            guard let uuid = form["notificationUUID"], UUID(uuidString: uuid) != nil else { throw Invalid(detail: "not a notification id") }
            action.notificationUUID = uuid
        case .signOut: break
        case .grantOrder:
            let id = (form["orderId"] ?? "").trimmingCharacters(in: .whitespaces)
            guard (1...20).contains(id.count), id.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) else {
                throw Invalid(detail: "an order id is 1-20 letters and digits (the one on Apple's emailed receipt)")
            }
            action.orderId = id
        }
        return action
    }
}

extension ConsoleService {
    /// Only this customer's purchases from this customer's page: a form naming another's is refused before anything is done.
    func owns(_ accountId: String, _ transactionId: String) async throws -> Bool {
        let owner = try await absentIfNotFound {
            try await self.fulfillment.call(
                FulfillmentGetCustomer.self, .init(adminToken: self.configuration.adminToken, transactionId: transactionId, ledgerLimit: 1)
            ).accountId
        }
        return owner == accountId
    }

    func confirmPage(_ accountId: String, _ form: [String: String], _ session: OperatorSession) async throws -> Response {
        let action: CustomerAction
        do { action = try CustomerAction.parse(form) } catch { return problem(.badRequest, "Not done", error.detail, session: session) }
        // A new key per confirmation page: submitting the page twice does the action once.
        let fields = action.fields + [("key", UUID().uuidString.lowercased())]
        return page(
            "confirm", title: "Confirm",
            [
                "label": action.label, "summary": action.summary, "reason": action.reason, "accountId": accountId, "csrf": session.csrfToken,
                "fields": fields.map { ["name": $0.0, "value": $0.1] },
            ], session: session)
    }

    func act(_ accountId: String, _ form: [String: String], _ session: OperatorSession, _ context: ConsoleRequestContext) async throws -> Response {
        let action: CustomerAction
        do { action = try CustomerAction.parse(form) } catch { return problem(.badRequest, "Not done", error.detail, session: session) }
        guard let key = form["key"], UUID(uuidString: key) != nil else {
            return problem(.badRequest, "Not done", "the form has no key", session: session)
        }
        let admin = configuration.adminToken, who = session.operatorName
        var row: LedgerEntry? = nil
        var replayed = false
        let outcome: String
        do {
            switch action.kind {
            case .giveCoins, .takeCoins:
                let delta = action.kind == .giveCoins ? action.amount : -action.amount
                let answer = try await fulfillment.call(
                    FulfillmentAdjustCoins.self,
                    .init(
                        adminToken: admin, accountId: accountId, environment: action.environment, delta: delta, reason: action.reason,
                        idempotencyKey: key, operatorName: who))
                row = answer.entry
                replayed = !answer.applied
                outcome =
                    "Balance now \(answer.balance) coins (\(answer.environment.rawValue))\(answer.applied ? "" : "; this was done before, not again")."
            case .revoke:
                guard try await owns(accountId, action.transactionId) else {
                    return problem(.badRequest, "Not done", "that purchase is not this customer's", session: session)
                }
                _ = try await fulfillment.call(
                    FulfillmentRevokeTransaction.self,
                    .init(adminToken: admin, transactionId: action.transactionId, reason: action.reason, operatorName: who))
                outcome = "Purchase \(action.transactionId) revoked."
            case .extend:
                guard try await owns(accountId, action.transactionId) else {
                    return problem(.badRequest, "Not done", "that subscription is not this customer's", session: session)
                }
                let answer = try await fulfillment.call(
                    FulfillmentExtendSubscription.self,
                    .init(
                        adminToken: admin, originalTransactionId: action.transactionId, days: action.days, reasonCode: 1, reason: action.reason,
                        requestId: key, operatorName: who))
                outcome = "Subscription \(answer.originalTransactionId) now ends \(Self.time(answer.expiresAtMs))."
            case .retry, .dismiss:
                // Only a notification about this customer's purchases, from this customer's page.
                let customer = try await fulfillment.call(
                    FulfillmentGetCustomer.self, .init(adminToken: admin, accountId: accountId, ledgerLimit: 1))
                guard customer.notifications.contains(where: { $0.notification.notificationUUID == action.notificationUUID }) else {
                    return problem(.badRequest, "Not done", "that notification is not about this customer's purchases", session: session)
                }
                let answer =
                    action.kind == .retry
                    ? try await fulfillment.call(
                        FulfillmentRetryNotification.self, .init(adminToken: admin, notificationUUID: action.notificationUUID, operatorName: who))
                    : try await fulfillment.call(
                        FulfillmentDismissNotification.self,
                        .init(adminToken: admin, notificationUUID: action.notificationUUID, reason: action.reason, operatorName: who))
                outcome = "Notification \(answer.notificationUUID) is now \(answer.state.rawValue)."
            case .signOut:
                let answer = try await fulfillment.call(
                    FulfillmentSignOutCustomer.self, .init(adminToken: admin, accountId: accountId, reason: action.reason, operatorName: who))
                outcome = "\(answer.ended) session(s) ended: every device must sign in again."
            case .grantOrder:
                let account = try await accounts.call(
                    AccountsGetAccount.self, .init(accountId: accountId, internalToken: configuration.internalToken))
                let answer = try await fulfillment.call(
                    FulfillmentGrantOrder.self,
                    .init(adminToken: admin, orderId: action.orderId, username: account.username, reason: action.reason, operatorName: who))
                guard answer.accountId == accountId else {
                    return problem(.conflict, "Done elsewhere", "the order went to account \(answer.accountId), not this one", session: session)
                }
                outcome =
                    "Order \(answer.orderId): "
                    + answer.results.map { "\($0.transactionId) \($0.productId) \($0.outcome.rawValue)" }.joined(separator: ", ")
            }
        } catch let error as RPCError {
            // A refusal is final; a timeout or an unavailable service may have done it or not: the same form again (the
            // same key) does it at most once.
            guard error.retryable || error.knownCode == .internalError else {
                try await audit(session, action.kind.rawValue + "Refused", "\(accountId): \(error.message)", context)
                return problem(.conflict, "Not done", error.message, session: session)
            }
            try await audit(session, action.kind.rawValue + "Unknown", "\(accountId): \(error.message)", context)
            return page(
                "confirm", title: "Outcome unknown",
                [
                    "label": action.label, "reason": action.reason, "accountId": accountId, "csrf": session.csrfToken,
                    "summary": "The service did not answer (\(error.message)): it may or may not have been done. Confirm again to "
                        + "finish it; it is done at most once.",
                    "fields": (action.fields + [("key", key)]).map { ["name": $0.0, "value": $0.1] },
                ], session: session, status: .serviceUnavailable)
        }
        try await audit(
            session, action.kind.rawValue + (replayed ? "Replayed" : ""), "\(accountId): \(action.summary) Reason: \(action.reason)", context)
        let audit = try await fulfillment.call(FulfillmentListAudit.self, .init(adminToken: admin, limit: 1, accountId: accountId)).entries.first
        var data: [String: Any] = ["label": action.label, "outcome": outcome, "accountId": accountId]
        if let row {
            data["row"] = ["id": row.id, "kind": row.kind.rawValue, "delta": row.delta, "balance": row.balance, "memo": row.memo ?? ""]
        }
        if let audit { data["audit"] = Self.auditRow(audit) }
        return page("done", title: "Done", data, session: session)
    }
}
