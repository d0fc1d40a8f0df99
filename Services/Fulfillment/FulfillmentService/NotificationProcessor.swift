import Crypto
import Foundation
import IAPProtocol
import JSONRPC
import Logging
import NIOConcurrencyHelpers
import Receipts
import ServiceSupport

/// App Store Server Notifications v2: verified, recorded in the inbox, brought to Apple's word (or the signed
/// snapshot), retried and parked; the inbox's admin methods and the administrator's revocation.
public struct NotificationProcessor: FulfillmentPart {
    let service: FulfillmentService

    // MARK: notifications and admin

    /// App Store Server Notifications v2, as the edge's webhook hands them over: verified, then recorded
    /// durably by `notificationUUID` (the answer means it is on disk), then processed. A redelivery finds
    /// its row and changes nothing; processing that fails stays `pending` and is retried from the inbox
    /// (`processDueNotifications`), parked after `InboxRetryPolicy.maxAttempts`.
    public func receiveNotification(_ p: FulfillmentApplyNotification.Params) async throws(RPCError)
        -> FulfillmentReceiveNotification.Result
    {
        // Only the edge's webhook (and operators) hand notifications over: an open port answers nobody else.
        try TokenGate.internal.check(p.internalToken, configured: configuration.internalToken)
        let answer = try await dependencies.verifyNotification(p.signedPayload)
        guard answer.status == 0, let notification = answer.notification else {
            throw RPCError.invalidReceipt(
                status: answer.status, reason: answer.reason ?? "invalidNotification",
                detail: "the notification failed verification (status \(answer.status))")
        }
        let decoded = AppleNotification(notification)
        let uuid =
            decoded.notificationUUID
            ?? SHA256.hash(data: Array(p.signedPayload.utf8)).map { String(format: "%02x", $0) }.joined()
        // Applied before the inbox existed (an older version of this service).
        if try await storeCall({ try await self.store.notificationWasApplied(uuid) }) {
            return .init(notificationUUID: uuid, state: .applied, firstDelivery: false)
        }
        let now = clock.nowMs
        let entry = InboxEntry(
            notificationUUID: uuid, notificationType: decoded.type.rawValue, subtype: decoded.subtype?.rawValue,
            signedDateMs: decoded.signedDateMs,
            signedPayload: p.signedPayload, notification: (try? JSONByteEncoder.encode(notification)) ?? [],
            // Leased to this call for a minute: the inbox worker leaves it alone while it is processed here,
            // and picks it up if this process dies first.
            receivedAtMs: now, nextAttemptAtMs: now + configuration.inboxLeaseMs,
            originalTransactionId: decoded.transaction?.originalTransactionId)
        let recorded = try await storeCall { try await self.store.recordNotification(entry) }
        guard recorded.isNew else {
            logger.info("notification delivered again", metadata: ["notificationUUID": "\(uuid)", "state": "\(recorded.entry.state)"])
            return .init(notificationUUID: uuid, state: recorded.entry.state, firstDelivery: false)
        }
        if p.processLater == true {
            // Durable already: processed right after this answer, or by the inbox worker once its lease ends.
            if case .dropped = service.laterQueue.yield(entry) {
                // Queue full: due now for the inbox worker instead of after its lease.
                logger.notice("notification processing queue full; the inbox worker takes it", metadata: ["notificationUUID": "\(uuid)"])
                try? await store.settleNotification(uuid, state: .pending, attempts: 0, nextAttemptAtMs: now, lastError: nil, nowMs: now)
            }
            return .init(notificationUUID: uuid, state: .pending, firstDelivery: true)
        }
        return .init(notificationUUID: uuid, state: await process(entry), firstDelivery: true)
    }

    /// `receiveNotification`, answering whether this delivery's notification is applied (v1's shape).
    public func applyNotification(_ p: FulfillmentApplyNotification.Params) async throws(RPCError) -> FulfillmentApplyNotification.Result {
        .init(applied: try await receiveNotification(p).state == .applied)
    }

    /// Processes the inbox's due notifications (oldest signed first); answers how many were tried.
    /// The executable's inbox worker calls it every few seconds.
    @discardableResult
    public func processDueNotifications(limit: Int = 100) async throws(RPCError) -> Int {
        try await processDueBatch(limit: limit).tried
    }

    /// One batch of due notifications: how many were tried, whether that was a whole batch (`limit`: more may be due), and
    /// how many came to an end (applied, ignored or parked) rather than pending again.
    func processDueBatch(limit: Int = 100) async throws(RPCError) -> (tried: Int, whole: Bool, ended: Int) {
        let now = clock.nowMs
        let due = try await storeCall { try await self.store.dueNotifications(nowMs: now, limit: limit) }
        var ended = 0
        for entry in due where await process(entry, reverify: true) != .pending { ended += 1 }
        return (due.count, due.count == limit, ended)
    }

    /// Whether the worker takes another batch at once after this one: only after a whole batch of which some came to an
    /// end. A whole batch left pending (Apple down: each waits for its next attempt; or its outcomes could not be
    /// written, and the same ones are due again) waits for the next round instead of being read again and again.
    static func takesAnotherBatch(whole: Bool, ended: Int) -> Bool { whole && ended > 0 }

    /// One processing attempt, its outcome recorded: `applied`, `ignored`, or (failing) `pending` with a
    /// later attempt or `parked`. `reverify`: a row read back from the inbox (the worker, a retry) is verified again
    /// from its signed payload, never taken from the stored copy: an older version may have recorded what today's
    /// rules refuse (Xcode-signed notifications, unsigned nested objects).
    func process(_ entry: InboxEntry, reverify: Bool = false) async -> NotificationState {
        let attempts = entry.attempts + 1
        do {
            var payload: JSONValue
            if PlayNotifications.isPlay(entry) {
                // Google's word is asked afresh on every attempt: nothing of the push but its purchase token is acted upon.
                payload = .null
            } else if reverify {
                let answer = try await dependencies.verifyNotification(entry.signedPayload)
                guard answer.status == 0, let notification = answer.notification else {
                    let reason = "it no longer passes verification (status \(answer.status), \(answer.reason ?? "refused"))"
                    logger.info("notification ignored", metadata: ["notificationUUID": "\(entry.notificationUUID)", "reason": "\(reason)"])
                    let now = clock.nowMs
                    try await storeCall {
                        try await self.store.settleNotification(
                            entry.notificationUUID, state: .ignored, attempts: attempts, nextAttemptAtMs: now, lastError: reason, nowMs: now)
                    }
                    return .ignored
                }
                payload = notification
            } else {
                payload = try JSONValue(parsing: entry.notification)
            }
            let facts =
                PlayNotifications.isPlay(entry)
                ? try await service.playNotifications.facts(entry) : try await facts(AppleNotification(payload), entry: entry)
            let now = clock.nowMs
            let owed = service.owesApple
            let decision = try await storeCall {
                try await self.store.applyNotification(facts, uuid: entry.notificationUUID, attempts: attempts, owed: owed, nowMs: now)
            }
            if !owed.isDisjoint(with: [.finishes, .playAcknowledgements]) && decision.effects.contains(where: \.isGrant)
                || facts.consumption != nil && decision.applied
            {
                service.outboxWakeup.signal()
            }
            logger.info(
                "notification",
                metadata: [
                    "notificationUUID": "\(entry.notificationUUID)", "type": "\(entry.notificationType)",
                    "transactionId": "\(facts.purchase?.transactionId ?? "-")", "applied": "\(decision.applied)",
                    "reason": "\(decision.ignoredBecause ?? "-")",
                ])
            return decision.applied ? .applied : .ignored
        } catch {
            let now = clock.nowMs
            let (state, next) = configuration.inboxRetry.afterFailure(attempts: attempts, nowMs: now)
            let message = (error as? RPCError)?.message ?? "\(error)"
            logger.log(
                level: state == .parked ? .error : .warning,
                state == .parked ? "notification parked after repeated failures" : "notification processing failed; will retry",
                metadata: [
                    "notificationUUID": "\(entry.notificationUUID)", "type": "\(entry.notificationType)", "attempts": "\(attempts)",
                    "error": "\(message)",
                ])
            // If even this fails, the row stays pending under its lease and the worker tries again: pending, whatever was
            // meant (the inbox worker's next batch at once is for progress actually recorded).
            do {
                try await store.settleNotification(
                    entry.notificationUUID, state: state, attempts: attempts, nextAttemptAtMs: next, lastError: message, nowMs: now)
            } catch {
                return .pending
            }
            return state
        }
    }

    /// What `NotificationRules` decides from, gathered before the transaction: the notification's disposition and
    /// signed snapshot, its renewal info, and for news about a transaction's standing Apple's current word (App Store
    /// Server API, through verification), the catalog's rule and the account of its appAccountToken. A consumption
    /// request is answered here (it changes nothing in this database).
    func facts(_ notification: AppleNotification, entry: InboxEntry) async throws(RPCError) -> NotificationRules.Facts {
        if case .unknown(let raw) = notification.type {
            logger.notice("a notification type this version does not know; ignored", metadata: ["type": "\(raw)"])
        }
        let disposition = NotificationDisposition.of(type: notification.type.rawValue, subtype: notification.subtype?.rawValue)
        let snapshot = notification.transaction.flatMap { VerifiedPurchase($0, environment: notification.environment) }
        var facts = NotificationRules.Facts(
            disposition: disposition, type: notification.type, snapshot: snapshot,
            renewal: notification.renewalInfo.flatMap { RenewalState($0, fallbackSignedDateMs: notification.signedDateMs) },
            signedDateMs: entry.signedDateMs)
        facts.summary = notification.summary
        guard let snapshot else { return facts }
        switch disposition {
        case .bringToAppleState:
            facts.current = try await currentFromApple(snapshot.transactionId)
            let purchase = facts.current ?? snapshot
            facts.scope = configuration.sandboxPolicy.scope(forEnvironment: purchase.environment)
            // Only what a grant needs, and only when the purchase may be granted: a refund of a purchase never seen here
            // grants nothing (a refunded renewal takes back its owner's access, with the rule).
            let refunded = purchase.cancellationDateMs != nil
            if !refunded || purchase.transactionId != purchase.originalTransactionId {
                facts.rule = try await service.grantRules(for: [purchase.productId])[purchase.productId]
            }
            if !refunded, let token = purchase.appAccountToken, let internalToken = configuration.internalToken,
                try await storeCall({ try await self.store.owner(originalTransactionId: purchase.originalTransactionId) }) == nil
            {
                facts.tokenAccountId = try await dependencies.account(appAccountToken: token, internalToken: internalToken)
            }
        case .answerConsumptionRequest:
            let now = clock.nowMs
            let signed = notification.signedDateMs ?? now
            facts.consumption = try await answerConsumptionRequest(snapshot, signedDateMs: signed, nowMs: now).map {
                OwedConsumptionAnswer(request: $0, deadlineMs: signed + configuration.consumptionWindowMs)
            }
        default:
            break
        }
        return facts
    }

    /// The transaction as Apple has it now, verified; nil when this deployment cannot ask Apple (no internal
    /// token or no App Store Server API) or Apple does not know it (then the notification's snapshot serves).
    func currentFromApple(_ transactionId: String) async throws(RPCError) -> VerifiedPurchase? {
        guard let token = configuration.internalToken else { return nil }
        do {
            let answer = try await dependencies.transactionInfo(transactionId, internalToken: token)
            guard answer.status == 0, let payload = answer.transaction else { return nil }
            return VerifiedPurchase.fromSignedTransaction(payload, environment: answer.environment)
        } catch  where error.has(.appStoreAPINotConfigured) || error.knownCode == .notFound {
            return nil
        }
    }

    /// Apple asks, after a customer requested a refund, how the purchase was used (CONSUMPTION_REQUEST). Answered
    /// (Send Consumption Information v2, through the outbox once the notification's transaction commits) only when the
    /// account has consented (`accounts.setConsumptionConsent`), within Apple's 12-hour window, for a purchase granted
    /// here; nil otherwise. What is sent is what the ledger says (`ConsumptionRules`).
    func answerConsumptionRequest(_ purchase: VerifiedPurchase, signedDateMs: Int64, nowMs: Int64) async throws(RPCError)
        -> AppleConsumptionRequest?
    {
        guard let internalToken = configuration.internalToken, nowMs - signedDateMs < configuration.consumptionWindowMs else { return nil }
        guard let record = try await storeCall({ try await self.store.processed(transactionId: purchase.transactionId) }) else { return nil }
        let profile = try await dependencies.consumptionProfile(accountId: record.holder.accountId, internalToken: internalToken)
        guard profile.consent else {
            logger.info("consumption request not answered: the account has not consented", metadata: ["transactionId": "\(purchase.transactionId)"])
            return nil
        }
        return ConsumptionRules.request(try await use(of: record, purchase, nowMs: nowMs), revoked: record.revokedAtMs != nil)
    }

    /// How the purchase could be used, from the catalog's product (what it grants) and this account's records.
    private func use(of record: ProcessedTransaction, _ purchase: VerifiedPurchase, nowMs: Int64) async throws(RPCError)
        -> ConsumptionRules.Use
    {
        let holder = record.holder
        switch try await dependencies.products([record.productId]).products.first(where: { $0.productId == record.productId })?.grant {
        case .content(_, let ids)?:
            let delivered = try await storeCall { try await self.store.deliveredContent(accountId: holder.accountId, scope: holder.scope) }
            return .content(contentIds: ids, delivered: delivered)
        case .subscription?:
            return .autoRenewable
        case .timeLimited(_, let days)?:
            // The period as granted here: a pass bought while another ran starts when that one ends.
            let granted = try await storeCall { try await self.store.entitlement(originalTransactionId: record.originalTransactionId) }
            guard let granted, let ends = granted.expiresAtMs else {
                return .period(startMs: purchase.purchaseDateMs, durationMs: Int64(days) * 86_400_000, nowMs: nowMs)
            }
            return .period(startMs: granted.startsAtMs, durationMs: ends - granted.startsAtMs, nowMs: nowMs)
        case nil where purchase.expiresDateMs != nil:
            return .autoRenewable  // a product the catalog no longer has, which Apple's transaction shows renews
        case .coins?, nil:
            // A product the catalog no longer has: what its record says (coins, or an unlock delivered when granted).
            guard record.coinsGranted > 0 else { return .content(contentIds: [], delivered: []) }
            let wallet = try await storeCall { try await self.store.balance(accountId: holder.accountId, scope: holder.scope) }
            return .coins(granted: record.coinsGranted, balance: wallet.balance)
        }
    }

    // MARK: notification inbox (admin)

    public func listNotifications(_ p: FulfillmentListNotifications.Params) async throws(RPCError) -> FulfillmentListNotifications.Result {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        let limit = p.limit ?? configuration.defaultLedgerPage
        guard (1...configuration.maxLedgerPage).contains(limit) else {
            throw RPCError.invalidParams("limit must be 1-\(configuration.maxLedgerPage)", field: "limit", reason: "invalidValue")
        }
        let rows = try await storeCall { try await self.store.notifications(state: p.state, limit: limit) }
        return .init(notifications: rows.map(\.summary))
    }

    /// Processes one parked or pending notification now (after an operator fixed what made it fail).
    public func retryNotification(_ p: FulfillmentRetryNotification.Params) async throws(RPCError) -> NotificationSummary {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        guard let entry = try await storeCall({ try await self.store.notification(p.notificationUUID) }) else {
            throw RPCError.notFound("no notification \(p.notificationUUID) was recorded here", reason: "unknownNotification")
        }
        try SupportDesk.checkOperator(p.operatorName)
        guard [.parked, .pending].contains(entry.state) else { return entry.summary }
        // Audited before it runs (what it changes is in the ledger and the events): who retried what, from which state;
        // then where it ended. Audited only after it, an audit write that failed left a grant nobody was named for, and
        // the operator's second try found the notification applied and wrote nothing (until 2026-11-30).
        var owner: String?
        if let original = entry.originalTransactionId {
            owner = try await storeCall { try await self.store.owner(originalTransactionId: original)?.accountId }
        }
        try await service.support.audit(
            "retryNotification", accountId: owner, transactionId: entry.originalTransactionId,
            reason: "\(entry.notificationType) \(p.notificationUUID): retried while \(entry.state.rawValue)", token: p.adminToken,
            operatorName: p.operatorName)
        logger.notice("notification retried by an administrator", metadata: ["notificationUUID": "\(p.notificationUUID)"])
        _ = await process(entry, reverify: true)
        let after = try await storeCall({ try await self.store.notification(p.notificationUUID) }) ?? entry
        // And where it ended, naming the account it granted to when it made the first grant (unknown before it ran).
        if owner == nil, let original = entry.originalTransactionId {
            owner = try await storeCall { try await self.store.owner(originalTransactionId: original)?.accountId }
        }
        try await service.support.audit(
            "retryNotification", accountId: owner, transactionId: entry.originalTransactionId,
            reason: "\(entry.notificationType) \(p.notificationUUID): \(entry.state.rawValue) -> \(after.state.rawValue)", token: p.adminToken,
            operatorName: p.operatorName)
        return after.summary
    }

    /// Records a purchase Apple told us about (a notification, a status) for its account, as a redeem would:
    /// the outcomes, none when the account cannot be known.
    func applyFromApple(_ purchase: VerifiedPurchase, nowMs: Int64) async throws(RPCError) -> [RedeemOutcome] {
        guard let scope = configuration.sandboxPolicy.scope(forEnvironment: purchase.environment) else { return [] }
        var accountId = try await storeCall { try await self.store.owner(originalTransactionId: purchase.originalTransactionId)?.accountId }
        var token: String?
        if accountId == nil, let appAccountToken = purchase.appAccountToken, let internalToken = configuration.internalToken {
            accountId = try await dependencies.account(appAccountToken: appAccountToken, internalToken: internalToken)
            token = appAccountToken
        }
        guard let accountId else { return [] }
        let rules = try await service.grantRules(for: [purchase.productId])
        let appAccountToken = token
        let owed = service.owesApple.intersection(.finishes)
        let applied = try await storeCall {
            try await self.store.apply(
                [.init(purchase: purchase, rule: rules[purchase.productId], scope: scope)], accountId: accountId,
                appAccountToken: appAccountToken, owed: owed, mode: .redeem, policy: .refuse, answerScope: scope, nowMs: nowMs)
        }
        if applied.owesApple { service.outboxWakeup.signal() }
        return applied.results.map(\.outcome)
    }

    public func revokeTransaction(_ p: FulfillmentRevokeTransaction.Params) async throws(RPCError) {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        try SupportDesk.checkReason(p.reason, maxBytes: configuration.maxMemoBytes)
        guard !GrantRules.storeRevocationReasons.contains(p.reason) else {
            throw RPCError.invalidParams(
                "\"\(p.reason)\" is how a store's own refunds and revocations are recorded; give yours in other words (\"chargeback\", \"fraud\")",
                field: "reason", reason: "invalidValue")
        }
        try SupportDesk.checkOperator(p.operatorName)
        let holder = try await storeCall { try await self.store.processed(transactionId: p.transactionId)?.holder }
        let outcome = try await storeCall {
            try await self.store.revoke(transactionId: p.transactionId, reason: p.reason, nowMs: self.clock.nowMs)
        }
        guard outcome != .notFound else {
            throw RPCError.notFound("transaction \(p.transactionId) was never processed here", reason: "unknownTransaction")
        }
        try await service.support.audit(
            "revoke", accountId: holder?.accountId, transactionId: p.transactionId, reason: p.reason, token: p.adminToken,
            operatorName: p.operatorName)
        logger.notice("transaction revoked by an administrator", metadata: ["transactionId": "\(p.transactionId)", "reason": "\(p.reason)"])
    }
}
