import Foundation
import Hummingbird
import IAPProtocol
import JSONRPC
import RPCTransport

/// Finding a customer by anything they can tell support, their page, and the actions on it (each confirmed on a page of
/// its own, then done through fulfillment with the operator's name and reason, then shown with its ledger row and audit
/// entry).
extension ConsoleService {
    func search(_ request: Request, _ session: OperatorSession) async throws -> Response {
        let query = (request.uri.queryParameters["q"].map(String.init) ?? "").trimmingCharacters(in: .whitespaces)
        if let accountId = try await resolve(query) { return ConsoleHTTP.redirect("/customers/\(accountId)") }
        return page("notFound", title: "Nothing found", ["query": query], session: session, status: .notFound)
    }

    /// The account a query names: a transaction or original transaction id (digits), an account id or appAccountToken
    /// (UUIDs), a Google Play order id (`GPA.`) or purchase token, a username, or an order id from Apple's emailed receipt
    /// (asked at Apple).
    func resolve(_ query: String) async throws -> String? {
        // Up to a Google Play purchase token's length (Google's are a few hundred characters).
        guard !query.isEmpty, query.utf8.count <= 4_096 else { return nil }
        let admin = configuration.adminToken, internalToken = configuration.internalToken
        if query.allSatisfy(\.isASCII), query.allSatisfy(\.isNumber), query.count <= 32 {
            return try await absentIfNotFound {
                try await self.fulfillment.call(FulfillmentGetCustomer.self, .init(adminToken: admin, transactionId: query, ledgerLimit: 1)).accountId
            }
        }
        if UUID(uuidString: query) != nil {
            if let id = try await absentIfNotFound({
                try await self.accounts.call(AccountsGetAccount.self, .init(accountId: query.lowercased(), internalToken: internalToken)).accountId
            }) {
                return id
            }
            return try await absentIfNotFound {
                try await self.accounts.call(AccountsFindByAppAccountToken.self, .init(appAccountToken: query, internalToken: internalToken))
                    .accountId
            }
        }
        if query.hasPrefix("GPA.") || query.utf8.count > 64,
            let id = try await absentIfNotFound({
                // Google Play's: its order id, or the purchase token (far longer than a username).
                try await self.fulfillment.call(FulfillmentGetCustomer.self, .init(adminToken: admin, transactionId: query, ledgerLimit: 1)).accountId
            })
        {
            return id
        }
        if let id = try await absentIfNotFound({
            try await self.accounts.call(AccountsFindByUsername.self, .init(username: query, internalToken: internalToken)).accountId
        }) {
            return id
        }
        guard query.count <= 20, query.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) else { return nil }
        let order = try await absentIfNotFound {
            try await self.fulfillment.call(FulfillmentLookUpOrder.self, .init(adminToken: admin, orderId: query))
        }
        return order?.lines.compactMap(\.ownerAccountId).first
    }

    /// nil for "no such thing" (not found, or a query that cannot be one); other failures go on.
    func absentIfNotFound<T>(_ body: () async throws -> T) async throws -> T? {
        do { return try await body() } catch let error as RPCError
            where [RPCErrorCode.notFound.rawValue, RPCErrorCode.invalidParams.rawValue].contains(error.code)
        { return nil }
    }

    func customerPage(_ accountId: String, _ session: OperatorSession) async throws -> Response {
        guard
            let account = try await absentIfNotFound({
                try await self.accounts.call(AccountsGetAccount.self, .init(accountId: accountId, internalToken: self.configuration.internalToken))
            })
        else { return problem(.notFound, "No such customer", "No account has the id \(accountId).", session: session) }
        let admin = configuration.adminToken
        let customer = try await fulfillment.call(FulfillmentGetCustomer.self, .init(adminToken: admin, accountId: accountId, ledgerLimit: 200))
        let audit = try await fulfillment.call(FulfillmentListAudit.self, .init(adminToken: admin, limit: 100, accountId: accountId))
        let events = try await timeline(accountId)
        let csrf = session.csrfToken, mayAct = session.role.mayAct
        let notificationsByOriginal = Dictionary(grouping: customer.notifications, by: \.originalTransactionId)
        let data: [String: Any] = [
            "username": account.username, "accountId": account.accountId, "appAccountToken": account.appAccountToken,
            "created": Self.time(account.createdAtMs), "csrf": csrf, "mayAct": mayAct,
            "scopes": customer.scopes.map { scope -> [String: Any] in
                [
                    "environment": scope.environment.rawValue, "balance": scope.balance, "owed": scope.owed, "accountId": accountId, "csrf": csrf,
                    "mayAct": mayAct, "hasEntitlements": !scope.entitlements.isEmpty,
                    "entitlements": scope.entitlements.map { e in
                        [
                            "entitlement": e.entitlement, "productId": e.productId, "ends": e.expiresAtMs.map(Self.time) ?? "permanent",
                            "renewal": Self.renewal(e), "originalTransactionId": e.originalTransactionId,
                        ]
                    },
                    "ledger": scope.ledger.map { row -> [String: Any] in
                        [
                            "id": row.id, "when": Self.time(row.createdAtMs), "kind": row.kind.rawValue, "delta": row.delta, "balance": row.balance,
                            "owed": row.owed ?? 0, "transactionId": row.transactionId ?? "", "memo": row.memo ?? "",
                        ]
                    },
                ]
            },
            "purchases": customer.purchases.map { p -> [String: Any] in
                [
                    "transactionId": p.transactionId, "originalTransactionId": p.originalTransactionId, "productId": p.productId,
                    "environment": p.environment, "state": p.state.rawValue, "bought": Self.time(p.purchaseDateMs),
                    "notifications": (notificationsByOriginal[p.originalTransactionId] ?? []).map {
                        [$0.notification.notificationType, $0.notification.subtype].compactMap { $0 }.joined(separator: "/")
                    }.joined(separator: ", "),
                    "accountId": accountId, "csrf": csrf, "mayRevoke": mayAct && [.granted, .reinstated].contains(p.state),
                    "mayExtend": mayAct && p.grantKind == "subscription" && p.transactionId == p.originalTransactionId && p.state != .revoked
                        && p.state != .refunded,
                ]
            },
            "notifications": customer.notifications.map { n -> [String: Any] in
                [
                    "received": Self.time(n.notification.receivedAtMs),
                    "type": [n.notification.notificationType, n.notification.subtype].compactMap { $0 }.joined(separator: "/"),
                    "state": n.notification.state.rawValue, "originalTransactionId": n.originalTransactionId,
                    "lastError": n.notification.lastError ?? "", "uuid": n.notification.notificationUUID, "accountId": accountId, "csrf": csrf,
                    "mayRetry": mayAct && [.parked, .pending].contains(n.notification.state),
                    "mayDismiss": mayAct && n.notification.state == .parked,
                ]
            },
            "timeline": events.reversed().map { e -> [String: Any] in
                [
                    "when": Self.time(e.occurredAtMs), "type": e.type.rawValue, "scope": e.scope.rawValue, "details": Self.details(e),
                    "balance": e.balance,
                ]
            },
            "audit": audit.entries.map(Self.auditRow),
        ]
        return page("customer", title: account.username, data, session: session)
    }

    /// The account's events, oldest first (at most the last 2,000: the page shows them newest first).
    func timeline(_ accountId: String) async throws -> [FulfillmentEvent] {
        var events: [FulfillmentEvent] = []
        var after: String? = nil
        while true {
            let page = try await fulfillment.call(
                FulfillmentListEvents.self, .init(adminToken: configuration.adminToken, after: after, limit: 1000, accountId: accountId))
            events += page.events
            if events.count > 2000 { events.removeFirst(events.count - 2000) }
            guard page.events.count == 1000 else { return events }
            after = page.next
        }
    }

    static func renewal(_ e: Entitlement) -> String {
        if let grace = e.gracePeriodExpiresAtMs { return "billing grace until \(time(grace))" }
        if e.inBillingRetry == true { return "billing retry" }
        switch e.willRenew {
        case true?: return "will renew"
        case false?: return "will not renew"
        case nil: return e.expiresAtMs == nil ? "" : "unknown"
        }
    }

    static func details(_ e: FulfillmentEvent) -> String {
        var parts: [String] = []
        if let product = e.productId { parts.append(product) }
        if let delta = e.delta { parts.append(delta >= 0 ? "+\(delta) coins" : "\(delta) coins") }
        if let debt = e.debt { parts.append("debt +\(debt)") }
        if let ends = e.entitlementEndsAtMs { parts.append("ends \(time(ends))") }
        if let action = e.action { parts.append(action) }
        if let reason = e.reason { parts.append("reason: \(reason)") }
        if let transaction = e.transactionId { parts.append("transaction \(transaction)") }
        return parts.joined(separator: ", ")
    }

    static func auditRow(_ a: AuditEntry) -> [String: Any] {
        [
            "when": time(a.atMs), "action": a.action, "operatorName": a.operatorName ?? "", "reason": a.reason,
            "transactionId": a.transactionId ?? "", "credential": a.credential,
        ]
    }
}
