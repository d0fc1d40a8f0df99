import CoreMetrics
import Foundation
import IAPProtocol
import JSONRPC
import NIOConcurrencyHelpers
import ServiceSupport

/// Delivers what fulfillment owes outside parties after commits (`Outbox.swift`), and lists it for operators.
public struct OutboxDelivery: FulfillmentPart {
    let service: FulfillmentService

    /// Delivers the outbox's due items (the background worker calls it when woken after a commit, and every few
    /// seconds); answers how many were tried. A failed delivery is tried again on `OutboxRetry`'s schedule, for as
    /// long as it takes: an item is removed only once delivered. Records the outbox's size and the age of its oldest
    /// item (`iap_outbox_items`, `iap_outbox_oldest_age_seconds`).
    @discardableResult
    public func deliverOutbox(limit: Int = 100) async throws(RPCError) -> Int {
        guard let internalToken = configuration.internalToken else { return 0 }
        let now = clock.nowMs  // before the claim: its lease may begin as soon as it is asked
        let due = try await storeCall { try await self.store.dueOutbox(nowMs: now, limit: limit) }
        var apiMissing = false
        for (index, item) in due.enumerated() {
            guard OutboxRetry.startsAnother(claimedAtMs: now, nowMs: clock.nowMs) else {
                let rest = Array(due[index...]), at = clock.nowMs
                try await storeCall { try await self.store.releaseOutbox(rest, nowMs: at) }
                logger.notice("outbox items left for the next round: this one ran long (slow answers)", metadata: ["items": "\(rest.count)"])
                break
            }
            var failure: String?
            var next = OutboxRetry.nextAttemptAtMs(failures: item.attempts + 1, nowMs: clock.nowMs)
            if OutboxKind(rawValue: item.kind) == nil {
                failure = "a kind of item this version does not deliver: kept for the version that does"
            } else if item.kind == OutboxKind.consumptionInformation.rawValue, let owed = Self.owed(item), clock.nowMs > owed.deadlineMs {
                // Apple takes an answer within 12 hours of its request; one still here after that (Apple unreachable, the API
                // not configured) would arrive too late to count.
                logger.error(
                    "Send Consumption Information: Apple's 12-hour window passed before the answer could be sent; not sent",
                    metadata: ["transactionId": "\(item.key)", "attempts": "\(item.attempts)"])
            } else if apiMissing, item.kind != OutboxKind.playAcknowledge.rawValue {
                // Apple's kinds only: Google's acknowledgements must not wait behind Apple's (Google refunds at three days).
                failure = Self.apiMissing
                next = clock.nowMs + OutboxRetry.whileNotConfiguredMs
            } else {
                do {
                    try await deliver(item, internalToken: internalToken)
                } catch  where item.kind == OutboxKind.finishTransaction.rawValue && error.knownCode == .notFound {
                    // Apple has no such transaction for this server's key (another app of the deployment, whose bundle id
                    // the key does not name): nothing there to finish, and asking again cannot change that.
                    logger.warning(
                        "Finish Transaction: Apple does not know the transaction for this key; nothing to finish there",
                        metadata: ["transactionId": "\(item.key)", "error": "\(error.message)"])
                } catch  where Self.refusedForGood(error, kind: item.kind) {
                    // Apple refused it for good: asking again cannot change that. Consumption answers: a transaction it does
                    // not know for this key, a field it does not take. Set App Account Token: a request Apple refuses (400),
                    // such as a family member's transaction (4000185: only the purchaser's takes a token) or one an
                    // organization assigned. The purchase stays granted here. Kept in the log for the operator.
                    logger.error(
                        "Apple refused what the outbox owed it; not sent again",
                        metadata: ["kind": "\(item.kind)", "transactionId": "\(item.key)", "error": "\(error.message)"])
                } catch
                    where item.kind == OutboxKind.playAcknowledge.rawValue
                    && [.conflict, .notFound, .invalidReceipt, .invalidParams].contains(error.knownCode ?? .internalError)
                {
                    // Google refunded or revoked it already, does not know it, or refuses it for good (another package, a
                    // package no longer allowed): asking again cannot change that. Kept in the log for the operator.
                    logger.error(
                        "Play acknowledgement: Google has the purchase revoked, unknown or refused; not sent again",
                        metadata: ["purchaseToken": "\(Self.redacted(item.key))", "error": "\(error.message)"])
                } catch  where error.has(.playAPINotConfigured) {
                    failure = "the Play Developer API is not configured on verification"
                    next = clock.nowMs + OutboxRetry.whileNotConfiguredMs
                } catch  where error.has(.appStoreAPINotConfigured) {
                    // Nothing reaches Apple until the operator configures the App Store Server API: every item of this
                    // batch waits ten minutes (asked once), so a backlog never keeps the worker from the inbox.
                    apiMissing = true
                    failure = Self.apiMissing
                    next = clock.nowMs + OutboxRetry.whileNotConfiguredMs
                    logger.notice("what is owed to Apple waits: the App Store Server API is not configured on verification")
                } catch {
                    failure = error.message
                    logger.warning(
                        "could not deliver an outbox item; will retry",
                        metadata: [
                            "kind": "\(item.kind)", "key": "\(item.kind == OutboxKind.playAcknowledge.rawValue ? Self.redacted(item.key) : item.key)",
                            "attempts": "\(item.attempts + 1)", "error": "\(error.message)",
                        ])
                }
            }
            let (settleFailure, settleNext) = (failure, next)
            try await storeCall {
                try await self.store.settleOutbox(item, delivered: settleFailure == nil, nextAttemptAtMs: settleNext, lastError: settleFailure)
            }
        }
        await recordOutboxGauges()
        return due.count
    }

    static let apiMissing = "the App Store Server API is not configured on verification"

    /// A purchase token in the log: enough to find it, not enough to redeem it.
    static func redacted(_ token: String) -> String { token.count > 12 ? "\(token.prefix(12))…" : token }

    static func owed(_ item: OutboxItem) -> OwedConsumptionAnswer? {
        try? JSONDecoder().decode(OwedConsumptionAnswer.self, from: Data(item.payload.utf8))
    }

    private func deliver(_ item: OutboxItem, internalToken: String) async throws(RPCError) {
        switch OutboxKind(rawValue: item.kind) {
        case .appAccountToken: try await tie(item, internalToken: internalToken)
        case .finishTransaction:
            await service.finishPace.next()
            try await dependencies.finishTransaction(item.key, internalToken: internalToken)
        case .consumptionInformation:
            guard let owed = Self.owed(item) else {
                // Written by this service's own encoder: never so unless the row was edited by hand; sending again cannot help.
                logger.error("the outbox's consumption answer is not a ConsumptionRequest; not sent", metadata: ["transactionId": "\(item.key)"])
                return
            }
            try await dependencies.sendConsumption(.init(internalToken: internalToken, transactionId: item.key, consumption: owed.request))
        case .playAcknowledge:
            guard let owed = try? JSONDecoder().decode(PlayFacts.Owed.self, from: Data(item.payload.utf8)) else {
                logger.error("the outbox's Play acknowledgement is not readable; not sent", metadata: ["purchaseToken": "\(Self.redacted(item.key))"])
                return
            }
            try await dependencies.acknowledgePlayPurchase(
                .init(
                    purchase: .init(
                        internalToken: internalToken, packageName: owed.packageName, productId: owed.productId, purchaseToken: item.key,
                        kind: owed.kind), consume: owed.consume))
        case .webhook, nil: break  // webhook items are the webhook worker's (never claimed here)
        }
    }

    /// Whether Apple's answer to an item refuses it for good (its error code given): a 400 for consumption answers and
    /// ties; a 404 for consumption answers, except Apple's codes that say to try again (4040002, 4040004, 4040006). A tie
    /// Apple answers 404 is tried again: a purchase can be found later (Apple's 4040010 says so too).
    public static func refusedForGood(_ error: RPCError, kind: String) -> Bool {
        guard let code = error.data.extra["appleErrorCode"]?.intValue else { return false }
        switch kind {
        case OutboxKind.appAccountToken.rawValue: return error.knownCode == .invalidParams
        case OutboxKind.consumptionInformation.rawValue:
            return error.knownCode == .invalidParams || (error.knownCode == .notFound && ![4_040_002, 4_040_004, 4_040_006].contains(code))
        default: return false
        }
    }

    /// Set App Account Token at Apple, unless Apple already holds a token for the purchase: whoever redeems a copied
    /// receipt first owns its purchases here (without the App Store Server API), but the buyer's app set its token
    /// when it bought, and Apple's notifications keep following it.
    private func tie(_ item: OutboxItem, internalToken: String) async throws(RPCError) {
        let current = try await dependencies.transactionInfo(item.key, internalToken: internalToken)
        if let held = current.transaction.flatMap(AppleTransaction.init)?.appAccountToken, !held.isEmpty {
            if held != item.payload {
                logger.notice(
                    "a purchase redeemed here carries another appAccountToken at Apple; left as Apple has it",
                    metadata: ["originalTransactionId": "\(item.key)"])
            }
            return
        }
        try await dependencies.setAppAccountToken(originalTransactionId: item.key, appAccountToken: item.payload, internalToken: internalToken)
    }

    func recordOutboxGauges() async {
        guard let listing = try? await store.outbox(limit: 0) else { return }
        Gauge(label: "iap_outbox_items").record(listing.total)
        let age = listing.oldestCreatedAtMs.map { max(0, clock.nowMs - $0) } ?? 0
        Gauge(label: "iap_outbox_oldest_age_seconds").record(Double(age) / 1000)
        // The alarm: Google refunds and revokes a purchase not acknowledged within three days; one still owed after a day
        // means Google has been refusing or unreachable for a day.
        if let overdue = try? await store.playAcknowledgementsOwed(createdBeforeMs: clock.nowMs - Self.playAcknowledgementAlarmMs) {
            Gauge(label: "iap_play_acknowledgements_overdue").record(overdue.count)
        }
    }

    /// How old an owed Google Play acknowledgement is before it counts in `iap_play_acknowledgements_overdue`.
    static let playAcknowledgementAlarmMs: Int64 = 86_400_000

    /// `fulfillment.listOutbox` (admin): what is owed to outside parties, oldest first, each with its attempts and
    /// last error, and the age of the oldest.
    public func listOutbox(_ p: FulfillmentListOutbox.Params) async throws(RPCError) -> FulfillmentListOutbox.Result {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        let limit = p.limit ?? configuration.defaultLedgerPage
        guard (1...configuration.maxLedgerPage).contains(limit) else {
            throw RPCError.invalidParams("limit must be 1-\(configuration.maxLedgerPage)", field: "limit", reason: "invalidValue")
        }
        let listing = try await storeCall { try await self.store.outbox(limit: limit) }
        let now = clock.nowMs
        return .init(
            items: listing.items.map {
                OutboxEntry(
                    kind: $0.kind, key: $0.key, attempts: $0.attempts, createdAtMs: $0.createdAtMs, nextAttemptAtMs: $0.nextAttemptAtMs,
                    lastError: $0.lastError)
            }, total: listing.total, oldestAgeMs: listing.oldestCreatedAtMs.map { max(0, now - $0) })
    }
}

/// At most `perSecond` calls a second: each `next()` returns no sooner than 1/perSecond after the one before.
final class Pace: Sendable {
    private let gap: Duration
    private let nextAt = NIOLockedValueBox(ContinuousClock.now)

    init(perSecond: Double) { gap = .nanoseconds(Int64(1e9 / max(perSecond, 0.001))) }

    func next() async {
        let now = ContinuousClock.now
        let at = nextAt.withLockedValue { next in
            let at = max(next, now)
            next = at + gap
            return at
        }
        if at > now { try? await Task.sleep(until: at, clock: .continuous) }
    }
}
