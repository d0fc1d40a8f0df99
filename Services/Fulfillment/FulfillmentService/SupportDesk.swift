import Crypto
import Foundation
import IAPProtocol
import JSONRPC
import Logging
import NIOConcurrencyHelpers
import Receipts
import ServiceSupport

/// Support actions (orders, grants, extensions at Apple), reconciliation with Apple, and the audit log.
public struct SupportDesk: FulfillmentPart {
    let service: FulfillmentService

    // MARK: support

    /// Support: an order's purchases from Apple (through verification) and the account each is bound to here.
    public func lookUpOrder(_ p: FulfillmentLookUpOrder.Params) async throws(RPCError) -> FulfillmentLookUpOrder.Result {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        let token = try internalTokenForApple("looking up orders")
        var lines: [OrderLine] = []
        for answer in try await dependencies.lookUpOrder(p.orderId, internalToken: token) {
            guard answer.status == 0, let payload = answer.transaction,
                let purchase = VerifiedPurchase.fromSignedTransaction(payload, environment: answer.environment)
            else { continue }
            let owner = try await storeCall { try await self.store.owner(originalTransactionId: purchase.originalTransactionId) }
            lines.append(
                OrderLine(
                    transactionId: purchase.transactionId, originalTransactionId: purchase.originalTransactionId,
                    productId: purchase.productId, environment: purchase.environment, ownerAccountId: owner?.accountId))
        }
        return .init(orderId: p.orderId, lines: lines)
    }

    /// Support: grants an order's purchases to the account of a username, exactly as that account's redeem
    /// would (same outcomes, same ownership policy: one owned by another account is not moved under the
    /// default policy), then ties them to the account at Apple. Audited per purchase granted, restored, or granted before
    /// (at least once: the grant and its audit are two writes, so a call whose grant committed and whose audit did not,
    /// retried by the operator as the console asks, finds the purchases `alreadyGranted` and writes the audit then).
    public func grantOrder(_ p: FulfillmentGrantOrder.Params) async throws(RPCError) -> FulfillmentGrantOrder.Result {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        try Self.checkReason(p.reason, maxBytes: configuration.maxMemoBytes)
        try Self.checkOperator(p.operatorName)
        let token = try internalTokenForApple("granting orders")
        let account = try await dependencies.account(username: p.username, internalToken: token)
        var purchases: [VerifiedPurchase] = []
        for answer in try await dependencies.lookUpOrder(p.orderId, internalToken: token) {
            if answer.status == 0, let payload = answer.transaction,
                let purchase = VerifiedPurchase.fromSignedTransaction(payload, environment: answer.environment)
            {
                purchases.append(purchase)
            }
        }
        guard !purchases.isEmpty else { throw RPCError.notFound("Apple has no order \(p.orderId) for this app", reason: "unknownOrder") }
        let (planned, refused) = try await service.plan(purchases)
        var results = refused
        let toApply = planned
        let applied = try await storeCall {
            try await self.store.apply(
                toApply, accountId: account.accountId, appAccountToken: account.appAccountToken, owed: self.service.owesApple,
                mode: .redeem, policy: self.configuration.ownershipPolicy, answerScope: toApply.first?.scope ?? .production,
                nowMs: self.clock.nowMs)
        }
        results += applied.results
        if applied.owesApple { service.outboxWakeup.signal() }  // what the grant owes Apple: its first attempt now
        for result in applied.results where [.granted, .restored, .alreadyGranted].contains(result.outcome) {
            let before = result.outcome == .alreadyGranted ? " (granted before this call, which changed nothing)" : ""
            try await audit(
                "grantOrder", accountId: account.accountId, transactionId: result.transactionId,
                reason: "order \(p.orderId): \(p.reason)\(before)", token: p.adminToken, operatorName: p.operatorName)
        }
        logger.notice(
            "order granted by an administrator",
            metadata: ["orderId": "\(p.orderId)", "accountId": "\(account.accountId)", "outcomes": "\(results.map(\.outcome.rawValue))"])
        return .init(orderId: p.orderId, accountId: account.accountId, results: results)
    }

    /// Support: extends a subscription's renewal date at Apple, then here (forward only); audited.
    public func extendSubscription(_ p: FulfillmentExtendSubscription.Params) async throws(RPCError) -> FulfillmentExtendSubscription.Result {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        try Self.checkReason(p.reason, maxBytes: configuration.maxMemoBytes)
        try Self.checkExtension(days: p.days, reasonCode: p.reasonCode)
        try Self.checkOperator(p.operatorName)
        guard FulfillmentService.isTransactionId(p.originalTransactionId) else {
            throw RPCError.invalidParams("transaction ids are 1-32 digits", field: "originalTransactionId", reason: "invalidValue")
        }
        let token = try internalTokenForApple("extending subscriptions")
        let answer = try await dependencies.extendRenewalDate(
            .init(
                internalToken: token, originalTransactionId: p.originalTransactionId, extendByDays: p.days, extendReasonCode: p.reasonCode,
                requestIdentifier: p.requestId ?? UUID().uuidString))
        guard answer.success, let expires = answer.effectiveDateMs else {
            throw RPCError.conflict("Apple did not extend the subscription", reason: "extensionRefused")
        }
        let now = clock.nowMs
        _ = try await storeCall {
            try await self.store.extendEntitlement(originalTransactionId: p.originalTransactionId, expiresAtMs: expires, nowMs: now)
        }
        let owner = try await storeCall { try await self.store.owner(originalTransactionId: p.originalTransactionId) }
        try await audit(
            "extendSubscription", accountId: owner?.accountId, transactionId: p.originalTransactionId,
            reason: "+\(p.days) days (code \(p.reasonCode)): \(p.reason)", token: p.adminToken, operatorName: p.operatorName)
        return .init(originalTransactionId: p.originalTransactionId, expiresAtMs: expires, accountId: owner?.accountId)
    }

    /// Support: extends every active subscriber of a product at Apple (carried out there afterwards; each extension
    /// arrives as RENEWAL_EXTENDED and is applied once, the counts as RENEWAL_EXTENSION / SUMMARY); audited.
    public func extendAllSubscriptions(_ p: FulfillmentExtendAllSubscriptions.Params) async throws(RPCError)
        -> FulfillmentExtendAllSubscriptions.Result
    {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        try Self.checkReason(p.reason, maxBytes: configuration.maxMemoBytes)
        try Self.checkExtension(days: p.days, reasonCode: p.reasonCode)
        let requestId = p.requestId ?? UUID().uuidString.lowercased()
        guard UUID(uuidString: requestId) != nil else {
            throw RPCError.invalidParams("requestId must be a UUID (Apple's requestIdentifier)", field: "requestId", reason: "invalidValue")
        }
        let environment = p.environment ?? .production
        let token = try internalTokenForApple("extending subscriptions")
        // Audited before Apple is asked: an answer lost on the way back leaves the request identifier in the log, so the
        // operator retries with it (the same request at Apple) instead of extending everyone again.
        let storefronts = p.storefrontCountryCodes.map { " in " + $0.joined(separator: ",") } ?? ""
        try await audit(
            "extendAllSubscriptions", transactionId: requestId,
            reason: "\(p.productId) +\(p.days) days (code \(p.reasonCode))\(storefronts), \(environment.rawValue): \(p.reason)", token: p.adminToken)
        let answer = try await dependencies.massExtendRenewalDate(
            .init(
                internalToken: token, environment: environment, productId: p.productId, extendByDays: p.days, extendReasonCode: p.reasonCode,
                requestIdentifier: requestId, storefrontCountryCodes: p.storefrontCountryCodes))
        logger.notice(
            "mass renewal extension requested at Apple",
            metadata: ["productId": "\(p.productId)", "days": "\(p.days)", "requestIdentifier": "\(answer.requestIdentifier)"])
        return .init(requestIdentifier: answer.requestIdentifier, environment: environment)
    }

    /// Support: a mass extension's status at Apple, and its summary once Apple's RENEWAL_EXTENSION / SUMMARY was processed.
    public func massExtensionStatus(_ p: FulfillmentMassExtensionStatus.Params) async throws(RPCError) -> FulfillmentMassExtensionStatus.Result {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        let token = try internalTokenForApple("reading a mass extension's status")
        let atApple = try await dependencies.massExtensionStatus(
            .init(internalToken: token, environment: p.environment ?? .production, productId: p.productId, requestIdentifier: p.requestIdentifier))
        let recorded = try await storeCall {
            try await self.store.audit(action: NotificationRules.summaryAction, transactionId: p.requestIdentifier, limit: 10)
        }
        // The same identifier may have been used for another product or environment (a rehearsal in Sandbox).
        let environment = (p.environment ?? .production).rawValue
        let kept = recorded.lazy.compactMap { entry in
            (try? JSONDecoder().decode(AppleMassExtensionSummary.self, from: Data(entry.reason.utf8))).map { (summary: $0, atMs: entry.atMs) }
        }.first { $0.summary.productId == p.productId && $0.summary.environment == environment }
        return .init(atApple: atApple, summary: kept?.summary, summaryRecordedAtMs: kept?.atMs)
    }

    /// Apple's limits on an extension: 1-90 days, reason code 0-3.
    static func checkExtension(days: Int, reasonCode: Int) throws(RPCError) {
        guard (1...90).contains(days) else { throw RPCError.invalidParams("days must be 1-90", field: "days", reason: "invalidValue") }
        guard (0...3).contains(reasonCode) else {
            throw RPCError.invalidParams("reasonCode must be 0-3 (Apple's extendReasonCode)", field: "reasonCode", reason: "invalidValue")
        }
    }

    /// An operator's name as the console sends it: 1-64 bytes of letters, digits and `._-@`.
    static func checkOperator(_ name: String?) throws(RPCError) {
        guard let name else { return }
        guard OperatorName.isValid(name) else {
            throw RPCError.invalidParams(
                "operatorName must be 1-64 letters, digits, '.', '_', '-' or '@'", field: "operatorName", reason: "invalidValue")
        }
    }

    static func checkReason(_ reason: String, maxBytes: Int) throws(RPCError) {
        guard !reason.isEmpty, reason.utf8.count <= maxBytes else {
            throw RPCError.invalidParams("reason must be 1-\(maxBytes) bytes", field: "reason", reason: "invalidValue")
        }
    }

    func internalTokenForApple(_ what: String) throws(RPCError) -> String {
        guard let token = configuration.internalToken else {
            throw RPCError(
                code: .unavailable, message: "\(what) needs the internal token (--internal-token) and the App Store Server API on verification",
                reason: .appStoreAPINotConfigured)
        }
        return token
    }

    // MARK: reconciliation

    /// `fulfillment.reconcile`: Notification History from the stored checkpoint (minus an overlap) to now,
    /// every page, in both environments; each notification the inbox lacks goes through `receiveNotification`
    /// (verified again, recorded, processed; ones already there change nothing). Then the status sweep:
    /// subscriptions that ended without news or are in billing retry, asked of Apple (Get All Subscription
    /// Statuses) and recorded like a renewal notification. The checkpoint moves only after a complete read.
    public func reconcile(_ p: FulfillmentReconcile.Params) async throws(RPCError) -> FulfillmentReconcile.Result {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        return try await reconcile(
            notificationHistory: p.notificationHistory ?? true, subscriptionStatuses: p.subscriptionStatuses ?? true,
            googlePlay: p.googlePlay ?? true)
    }

    /// Reconciles with Apple (Notification History, then the subscription status sweep) in a task of its own, one
    /// at a time: a call made while a run is under way joins it and gets its result. The run is never cancelled with
    /// its caller (an admin's CLI that gives up after 30 s, the server's request deadline), so a long history is read
    /// to its end and the notification being taken in is never cut off half-way.
    public func reconcile(notificationHistory: Bool = true, subscriptionStatuses: Bool = true, googlePlay: Bool = true) async throws(RPCError)
        -> FulfillmentReconcile.Result
    {
        let run = service.reconciliation.withLockedValue { current -> Task<FulfillmentReconcile.Result, any Error> in
            if let current { return current.run }
            let id = service.reconciliations.withLockedValue { n -> Int in
                n += 1
                return n
            }
            let run = Task.detached { [self] () async throws -> FulfillmentReconcile.Result in
                defer { service.reconciliation.withLockedValue { if $0?.id == id { $0 = nil } } }
                // Google first: a deployment that sells only on Google Play has no App Store Server API to fail the rest; and
                // Google failing (down, or a service account without the financial-data permission the list needs) never
                // stops Apple's part.
                var voids = (0, 0)
                var sweep = (0, 0)
                if googlePlay {
                    do {
                        voids = try await service.playNotifications.reconcileVoided()
                    } catch {
                        logger.error("Google Play's voided purchases could not be read; retried at the next run", metadata: ["error": "\(error)"])
                    }
                    do {
                        sweep = try await service.playNotifications.sweepSubscriptions()
                    } catch {
                        logger.error("Google Play's subscriptions could not be swept; retried at the next run", metadata: ["error": "\(error)"])
                    }
                }
                var result = try await reconcileNow(notificationHistory: notificationHistory, subscriptionStatuses: subscriptionStatuses)
                (result.playVoidsSeen, result.playVoidsTakenIn) = voids
                (result.playSubscriptionsChecked, result.playSubscriptionsUpdated) = sweep
                return result
            }
            current = (id, run)
            return run
        }
        do {
            return try await run.value
        } catch let error as RPCError {
            throw error
        } catch {
            throw RPCError.internalError()
        }
    }

    /// Where the App Store subscription sweep stopped (two reconcile checkpoint rows): the end and the original (digits)
    /// of the last one it asked about.
    static let sweepPosition = ("appStoreSweep", "appStoreSweepOriginal")

    func reconcileNow(notificationHistory: Bool, subscriptionStatuses: Bool) async throws(RPCError) -> FulfillmentReconcile.Result {
        let token = try internalTokenForApple("reconciling with Apple")
        var result = FulfillmentReconcile.Result(notificationsSeen: 0, notificationsTakenIn: 0, subscriptionsChecked: 0, subscriptionsUpdated: 0)
        if notificationHistory {
            for environment in [AppleEnvironment.production, .sandbox] {
                let now = clock.nowMs
                let checkpoint = try await storeCall { try await self.store.reconcileCheckpoint(environment: environment.rawValue) }
                // Apple keeps 180 days of history (30 in Sandbox) and refuses an earlier start: a checkpoint held at a refused
                // record no older than that, else every run would fail, and the sweep after it.
                let kept = Int64(environment == .production ? 179 : 29) * 86_400_000
                let start = max(0, now - kept, (checkpoint ?? now - configuration.reconcileFirstWindowMs) - configuration.reconcileOverlapMs)
                var page: String?
                var refusedFrom: Int64?  // the earliest record refused: the next run reads from it again
                repeat {
                    // An end in the future is read as Apple's now: a clock here behind Apple's misses nothing.
                    let answer = try await dependencies.notificationHistory(
                        .init(
                            internalToken: token, environment: environment, startDateMs: start, endDateMs: now + 366 * 86_400_000,
                            paginationToken: page))
                    for record in answer.notifications {
                        result.notificationsSeen += 1
                        if let uuid = record.notificationUUID, try await storeCall({ try await self.store.notification(uuid) }) != nil { continue }
                        let taken: Bool
                        do {
                            taken = try await service.notifications.receiveNotification(
                                .init(signedPayload: record.signedPayload, internalToken: token)
                            ).firstDelivery
                        } catch  where !error.retryable {
                            // Refused (its signature, its bundle: most likely this server's trust or bundle settings, which
                            // an operator mends): the rest of the run and the sweep go on, and the checkpoint stays at it, so
                            // every run reads it again until it is taken in.
                            logger.error(
                                "a Notification History record was refused; read again at the next run",
                                metadata: ["notificationUUID": "\(record.notificationUUID ?? "-")", "error": "\(error.message)"])
                            let signed = record.signedDateMs ?? start
                            refusedFrom = min(refusedFrom ?? signed, signed)
                            continue
                        }
                        if taken { result.notificationsTakenIn += 1 }
                    }
                    page = answer.hasMore ? answer.paginationToken : nil
                } while page != nil
                let reached = refusedFrom ?? now
                try await storeCall { try await self.store.saveReconcileCheckpoint(environment: environment.rawValue, signedDateMs: reached) }
            }
        }
        if subscriptionStatuses {
            let now = clock.nowMs, perRun = configuration.reconcileSubscriptionsPerRun
            // In turn: each run goes on after the end where the run before stopped, and starts over once through, so that
            // those Apple keeps answering the same about (billing retry, another app's) never hold the rest back.
            // The position is kept once, after the loop or when a question fails (that one's: it is passed by next time,
            // not stuck on).
            @Sendable func keep(_ expiresAtMs: Int64, _ original: Int64) async throws(RPCError) {
                try await storeCall {
                    try await self.store.saveReconcileCheckpoint(environment: Self.sweepPosition.0, signedDateMs: expiresAtMs)
                    try await self.store.saveReconcileCheckpoint(environment: Self.sweepPosition.1, signedDateMs: original)
                }
            }
            let afterMs = try await storeCall { try await self.store.reconcileCheckpoint(environment: Self.sweepPosition.0) } ?? .min
            let afterOriginal = try await storeCall { try await self.store.reconcileCheckpoint(environment: Self.sweepPosition.1) } ?? -1
            let due = try await storeCall {
                try await self.store.subscriptionsToCheck(
                    nowMs: now, limit: perRun, after: (afterMs, afterOriginal < 0 ? "" : String(afterOriginal)))
            }
            var reached: (Int64, Int64)? = due.count < perRun ? (.min, -1) : nil  // through: the next run starts over
            do throws(RPCError) {
                for (original, expiresAtMs) in due {
                    if due.count == perRun, let digits = Int64(original) { reached = (expiresAtMs, digits) }
                    result.subscriptionsChecked += 1
                    let statuses: [AppleSubscriptionStatus]
                    do {
                        statuses = try await dependencies.subscriptionStatuses(original, internalToken: token)
                    } catch  where error.knownCode == .notFound {
                        continue
                    }
                    guard let status = statuses.first(where: { $0.originalTransactionId == original }) else { continue }
                    var changed = false
                    if let state = RenewalState(renewalInfo: status.renewalInfo, fallbackSignedDateMs: nil) {
                        changed = try await storeCall { try await self.store.recordRenewal(state, nowMs: now) } || changed
                    }
                    if let purchase = AppleTransaction(status.transaction).flatMap({ VerifiedPurchase($0, environment: nil) }) {
                        if purchase.cancellationDateMs != nil {
                            let outcome = try await storeCall {
                                try await self.store.revoke(transactionId: purchase.transactionId, reason: "refunded", nowMs: now)
                            }
                            changed = outcome == .revoked || changed
                        } else {
                            changed = try await service.notifications.applyFromApple(purchase, nowMs: now).contains(.granted) || changed
                        }
                    }
                    if changed { result.subscriptionsUpdated += 1 }
                }
            } catch {
                if let reached { try await keep(reached.0, reached.1) }
                throw error
            }
            if let reached { try await keep(reached.0, reached.1) }
        }
        logger.info(
            "reconciled with Apple",
            metadata: [
                "notificationsSeen": "\(result.notificationsSeen)", "notificationsTakenIn": "\(result.notificationsTakenIn)",
                "subscriptionsChecked": "\(result.subscriptionsChecked)", "subscriptionsUpdated": "\(result.subscriptionsUpdated)",
            ])
        return result
    }

    public func listAudit(_ p: FulfillmentListAudit.Params) async throws(RPCError) -> FulfillmentListAudit.Result {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        let limit = p.limit ?? configuration.defaultLedgerPage
        guard (1...configuration.maxLedgerPage).contains(limit) else {
            throw RPCError.invalidParams("limit must be 1-\(configuration.maxLedgerPage)", field: "limit", reason: "invalidValue")
        }
        if let accountId = p.accountId {
            return .init(entries: try await storeCall { try await self.store.audit(accountId: accountId, limit: limit) })
        }
        return .init(entries: try await storeCall { try await self.store.audit(limit: limit) })
    }

    /// Writes an admin action to the audit log, naming the credential by a digest of it, never the token, and the
    /// operator when the caller named one.
    func audit(
        _ action: String, accountId: String? = nil, transactionId: String?, reason: String, token: String, operatorName: String? = nil
    ) async throws(RPCError) {
        let credential = Self.credential(token)
        let now = clock.nowMs
        try await storeCall {
            try await self.store.recordAudit(
                action: action, accountId: accountId, transactionId: transactionId, reason: reason, credential: credential,
                operatorName: operatorName, nowMs: now)
        }
    }

    /// An admin credential's name in the audit log: the first 12 hex digits of its SHA-256.
    static func credential(_ token: String) -> String {
        SHA256.hash(data: Array(token.utf8)).prefix(6).map { String(format: "%02x", $0) }.joined()
    }
}
