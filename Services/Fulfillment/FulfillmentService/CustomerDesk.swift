import IAPProtocol
import JSONRPC
import ServiceSupport

/// The support console's view of one customer and its coin adjustments (`fulfillment.getCustomer`,
/// `fulfillment.adjustCoins`).
public struct CustomerDesk: FulfillmentPart {
    let service: FulfillmentService

    /// An adjustment's key in the ledger: its own key space, which an app's spend keys may not enter (`spend` refuses
    /// them), so neither can answer for the other.
    static let adjustmentKeyPrefix = "adjustment:"

    /// Everything about a customer found by account id, or by a transaction or original transaction id of a purchase.
    public func getCustomer(_ p: FulfillmentGetCustomer.Params) async throws(RPCError) -> FulfillmentGetCustomer.Result {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        let limit = p.ledgerLimit ?? 100
        guard (1...configuration.maxLedgerPage).contains(limit) else {
            throw RPCError.invalidParams("ledgerLimit must be 1-\(configuration.maxLedgerPage)", field: "ledgerLimit", reason: "invalidValue")
        }
        let accountId: String
        switch (p.accountId, p.transactionId) {
        case (let id?, nil):
            guard !id.isEmpty, id.utf8.count <= 64 else {
                throw RPCError.invalidParams("accountId must be 1-64 bytes", field: "accountId", reason: "invalidValue")
            }
            accountId = id
        case (nil, let transactionId?):
            guard FulfillmentService.isTransactionId(transactionId) || FulfillmentService.isPlayId(transactionId) else {
                throw RPCError.invalidParams(
                    "transaction ids are 1-32 digits (App Store) or a Google Play order id or purchase token", field: "transactionId",
                    reason: "invalidValue")
            }
            guard let owner = try await storeCall({ try await self.store.accountId(transactionId: transactionId) }) else {
                throw RPCError.notFound("no purchase with transaction id \(transactionId) was processed here", reason: "unknownTransaction")
            }
            accountId = owner
        default:
            throw RPCError.invalidParams("give exactly one of accountId and transactionId", field: "accountId", reason: "invalidValue")
        }
        let now = clock.nowMs
        return try await storeCall { try await self.store.customer(accountId: accountId, ledgerLimit: limit, nowMs: now) }
    }

    /// Signs a customer out of all devices at accounts, then audits it.
    public func signOutCustomer(_ p: FulfillmentSignOutCustomer.Params) async throws(RPCError) -> FulfillmentSignOutCustomer.Result {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        try SupportDesk.checkReason(p.reason, maxBytes: configuration.maxMemoBytes)
        try SupportDesk.checkOperator(p.operatorName)
        let token = try internalToken("signing customers out")
        _ = try await dependencies.consumptionProfile(accountId: p.accountId, internalToken: token)  // unknownAccount when there is none
        let ended = try await dependencies.revokeSessions(accountId: p.accountId, internalToken: token)
        try await service.support.audit(
            "signOutCustomer", accountId: p.accountId, transactionId: nil, reason: "\(ended) sessions ended: \(p.reason)", token: p.adminToken,
            operatorName: p.operatorName)
        logger.notice("customer signed out of all devices by an operator", metadata: ["accountId": "\(p.accountId)", "ended": "\(ended)"])
        return .init(ended: ended)
    }

    /// Sets a parked notification aside for good, audited.
    public func dismissNotification(_ p: FulfillmentDismissNotification.Params) async throws(RPCError) -> NotificationSummary {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        try SupportDesk.checkReason(p.reason, maxBytes: configuration.maxMemoBytes)
        try SupportDesk.checkOperator(p.operatorName)
        let audit = AuditFacts(
            action: "dismissNotification", reason: p.reason, credential: SupportDesk.credential(p.adminToken), operatorName: p.operatorName)
        let now = clock.nowMs
        switch try await storeCall({
            try await self.store.dismiss(notificationUUID: p.notificationUUID, reason: p.reason, audit: audit, nowMs: now)
        }) {
        case .unknown: throw RPCError.notFound("no notification \(p.notificationUUID) was recorded here", reason: "unknownNotification")
        case .notParked(let state):
            throw RPCError.conflict(
                "notification \(p.notificationUUID) is \(state.rawValue), not parked: only a parked one is dismissed", reason: "notParked")
        case .dismissed:
            guard let entry = try await storeCall({ try await self.store.notification(p.notificationUUID) }) else {
                throw RPCError.notFound("no notification \(p.notificationUUID) was recorded here", reason: "unknownNotification")
            }
            return entry.summary
        }
    }

    func internalToken(_ what: String) throws(RPCError) -> String {
        guard let token = configuration.internalToken else {
            throw RPCError(
                code: .unavailable, message: "\(what) needs the internal token (--internal-token) to call accounts", reason: .dependencyUnavailable)
        }
        return token
    }

    /// The last days at a glance (Production): purchases, grants, refunds, revenue per currency; what waits now.
    public func getOverview(_ p: FulfillmentGetOverview.Params) async throws(RPCError) -> FulfillmentGetOverview.Result {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        let days = p.days ?? 30
        guard (1...90).contains(days) else { throw RPCError.invalidParams("days must be 1-90", field: "days", reason: "invalidValue") }
        let now = clock.nowMs
        return try await storeCall { try await self.store.overview(days: days, nowMs: now) }
    }

    /// Gives or takes back coins as one audited `adjustment` ledger row, once per idempotency key.
    public func adjustCoins(_ p: FulfillmentAdjustCoins.Params) async throws(RPCError) -> FulfillmentAdjustCoins.Result {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        try SupportDesk.checkReason(p.reason, maxBytes: configuration.maxMemoBytes)
        try SupportDesk.checkOperator(p.operatorName)
        guard p.delta != 0, p.delta.magnitude <= UInt64(configuration.maxSpend) else {
            throw RPCError.invalidParams(
                "delta must be non-zero and at most \(configuration.maxSpend) either way", field: "delta", reason: "invalidValue")
        }
        guard !p.idempotencyKey.isEmpty, p.idempotencyKey.utf8.count <= configuration.maxIdempotencyKeyBytes else {
            throw RPCError.invalidParams(
                "idempotencyKey must be 1-\(configuration.maxIdempotencyKeyBytes) bytes", field: "idempotencyKey", reason: "invalidValue")
        }
        guard !p.accountId.isEmpty, p.accountId.utf8.count <= 64 else {
            throw RPCError.invalidParams("accountId must be 1-64 bytes", field: "accountId", reason: "invalidValue")
        }
        // Only accounts that exist: coins given to a typo would sit in a wallet nobody can sign in to.
        let token = try internalToken("adjusting coins")
        _ = try await dependencies.consumptionProfile(accountId: p.accountId, internalToken: token)
        let scope = p.environment ?? .production
        let holder = Holder(accountId: p.accountId, scope: scope)
        let audit = AuditFacts(
            action: "adjustCoins", reason: p.reason, credential: SupportDesk.credential(p.adminToken), operatorName: p.operatorName)
        let key = Self.adjustmentKeyPrefix + p.idempotencyKey
        let now = clock.nowMs
        let outcome = try await storeCall {
            try await self.store.adjust(holder, delta: p.delta, idempotencyKey: key, audit: audit, nowMs: now)
        }
        switch outcome {
        case .adjusted(let entry, let wallet), .replayed(let entry, let wallet):
            var applied = false
            if case .adjusted = outcome { applied = true }
            if applied {
                logger.notice(
                    "coins adjusted by an operator",
                    metadata: ["accountId": "\(p.accountId)", "delta": "\(p.delta)", "operator": "\(p.operatorName ?? "-")"])
            }
            return .init(entry: entry, balance: wallet.balance, owed: wallet.owed, environment: scope, applied: applied)
        case .insufficient(let balance): throw RPCError.insufficientFunds(balance: balance, requested: -p.delta)
        case .keyConflict:
            throw RPCError.conflict("idempotency key \"\(p.idempotencyKey)\" was already used with other params", reason: "idempotencyKeyReused")
        }
    }
}
