import Foundation
import FulfillmentService
import IAPProtocol
import JSONRPC
import Logging
import NIOConcurrencyHelpers
import RPCTestSupport
import ServiceSupport
import Testing

/// Webhooks are tested on the real engines only.
struct InMemoryUnsupported: Error {}

/// `FulfillmentStorage` in memory: `GrantRules` over an `InMemoryLedger`, one write at a time.
/// `@unchecked Sendable`: the ledger (a plain class) is only ever touched inside `lock`, through `ledger`.
final class InMemoryStorage: FulfillmentStorage, @unchecked Sendable {
    private let lock = NIOLock()
    private let ledgerStorage = InMemoryLedger()
    private var ledger: Locked { Locked(storage: self) }
    private let inbox = NIOLockedValueBox([String: InboxEntry]())
    private let audits = NIOLockedValueBox([AuditEntry]())
    private let deliveries = NIOLockedValueBox(Set<String>())

    /// `withLockedValue` over the ledger, like NIOLockedValueBox.
    private struct Locked {
        let storage: InMemoryStorage
        func withLockedValue<T>(_ body: (InMemoryLedger) throws -> T) rethrows -> T {
            try storage.lock.withLock { try body(storage.ledgerStorage) }
        }
    }

    func apply(
        _ planned: [PlannedPurchase], accountId: String, appAccountToken: String?, owed: AppleFollowUps, mode: FulfillmentMode,
        policy: OwnershipPolicy, answerScope: AccountScope, nowMs: Int64
    ) async throws -> AppliedPurchases {
        try ledger.withLockedValue {
            try GrantRules.apply(
                planned, accountId: accountId, appAccountToken: appAccountToken, owed: owed, mode: mode, policy: policy,
                answerScope: answerScope, nowMs: nowMs, in: $0)
        }
    }
    func revoke(transactionId: String, reason: String, nowMs: Int64) async throws -> RevokeOutcome {
        try ledger.withLockedValue {
            guard $0.processed(transactionId) != nil else { return .notFound }
            return try GrantRules.revoke(transactionId, reason: reason, nowMs: nowMs, in: $0) ? .revoked : .alreadyRevoked
        }
    }
    func reinstate(transactionId: String, nowMs: Int64) async throws -> Bool {
        try ledger.withLockedValue { try GrantRules.reinstate(transactionId, nowMs: nowMs, in: $0) }
    }
    func recordRenewal(_ state: RenewalState, nowMs: Int64) async throws -> Bool { false }
    func applyNotification(_ facts: NotificationRules.Facts, uuid: String, attempts: Int, owed: AppleFollowUps, nowMs: Int64) async throws
        -> NotificationRules.Decision
    {
        let decision = try ledger.withLockedValue { ledger in
            let p = facts.purchase
            let stored = NotificationRules.Stored(
                processed: p.flatMap { ledger.processed($0.transactionId) }, owner: p.flatMap { ledger.owner(original: $0.originalTransactionId) })
            let decision = NotificationRules.decide(facts, stored: stored)
            for effect in decision.effects {
                switch effect {
                case .keepRenewal: break
                case .revoke(let id, let reason): _ = try GrantRules.revoke(id, reason: reason, nowMs: nowMs, in: ledger)
                case .rememberEarlyRevocation(let id, let reason, let share):
                    // As the store's: the first reason stays; a whole refund wins over a share.
                    if ledger.earlyRevocations[id] == nil {
                        ledger.earlyRefundShares[id] = share
                    } else if share == nil {
                        ledger.earlyRefundShares[id] = nil
                    }
                    ledger.earlyRevocations[id] = ledger.earlyRevocations[id] ?? reason
                case .reinstate(let id): _ = try GrantRules.reinstate(id, nowMs: nowMs, in: ledger)
                case .grant(let purchase, let accountId, let scope, let rule, let token):
                    _ = try GrantRules.apply(
                        [.init(purchase: purchase, rule: rule, scope: scope)], accountId: accountId, appAccountToken: token,
                        owed: owed.intersection(.finishes), mode: .redeem,
                        policy: .refuse, answerScope: scope, nowMs: nowMs, in: ledger)
                case .moveSubscriptionEnd(let original, let expires):
                    _ = try GrantRules.extendRenewal(original: original, expiresAtMs: expires, nowMs: nowMs, in: ledger)
                case .endSubscription(let original, let replacement, let atMs):
                    _ = try GrantRules.endSubscription(original: original, replacement: replacement, atMs: atMs, nowMs: nowMs, in: ledger)
                case .takeBackRefundedUnits(let id, let keepCoins):
                    _ = try GrantRules.takeBackRefundedUnits(id, keepCoins: keepCoins, nowMs: nowMs, in: ledger)
                case .shortenPass(let id, let keep, let of, let unitMs):
                    _ = try GrantRules.shortenPass(id, keepUnits: keep, ofUnits: of, unitMs: unitMs, nowMs: nowMs, in: ledger)
                case .recordExtensionSummary: break
                case .answerConsumption(let transactionId, let answer):  // an OwedConsumptionAnswer
                    ledger.enqueueOutbox(
                        kind: .consumptionInformation, key: transactionId,
                        payload: String(decoding: try JSONEncoder().encode(answer), as: UTF8.self), nowMs: nowMs)
                }
            }
            if let signed = decision.standsSignedMs, let p { ledger.recordStandsSigned(p.transactionId, signedMs: signed) }
            return decision
        }
        try await settleNotification(
            uuid, state: decision.applied ? .applied : .ignored, attempts: attempts, nextAttemptAtMs: nowMs, lastError: decision.ignoredBecause,
            nowMs: nowMs)
        return decision
    }
    func processed(transactionId: String) async throws -> ProcessedTransaction? { ledger.withLockedValue { $0.processed(transactionId) } }
    func reconcileCheckpoint(environment: String) async throws -> Int64? { nil }
    func saveReconcileCheckpoint(environment: String, signedDateMs: Int64) async throws {}
    func subscriptionsToCheck(nowMs: Int64, limit: Int, after: (expiresAtMs: Int64, original: String)) async throws
        -> [(original: String, expiresAtMs: Int64)]
    { [] }
    func playSubscriptionsToCheck(nowMs: Int64, limit: Int) async throws -> [PlaySubscriptionToCheck] { [] }
    func subscriptionHistory(accountId: String, scope: AccountScope, nowMs: Int64) async throws -> [SubscriptionHistoryRecord] {
        ledger.withLockedValue { ledger in
            ledger.entitlementRows.values.filter { $0.holder == Holder(accountId: accountId, scope: scope) && $0.expiresAtMs != nil }.map { e in
                let periods = ledger.processedRows.values.filter { $0.originalTransactionId == e.originalTransactionId }
                return SubscriptionHistoryRecord(
                    originalTransactionId: e.originalTransactionId, productIds: Set(periods.map(\.productId)).union([e.productId]),
                    active: GrantRules.isActive(e, renewal: nil, nowMs: nowMs), periodsPaid: periods.filter { $0.revokedAtMs == nil }.count)
            }
        }
    }
    func customerTransactionId(accountId: String) async throws -> String? {
        ledger.withLockedValue { ledger in
            ledger.entitlementRows.values.first { $0.holder == Holder(accountId: accountId, scope: .production) }?.originalTransactionId
        }
    }
    func recordEarlyRevocation(transactionId: String, reason: String, refundShareMilli: Int64?, nowMs: Int64) async throws {
        ledger.withLockedValue {
            $0.earlyRevocations[transactionId] = reason
            $0.earlyRefundShares[transactionId] = refundShareMilli
        }
    }
    /// The finishes the ledger owes (ties are not kept here), each due now.
    func dueOutbox(nowMs: Int64, limit: Int) async throws -> [OutboxItem] {
        ledger.withLockedValue { ledger in
            let owed =
                ledger.finishes.map { (OutboxKind.finishTransaction.rawValue, $0, "") }
                + ledger.consumptionAnswers.map { (OutboxKind.consumptionInformation.rawValue, $0.key, $0.payload) }
            return owed.prefix(limit).enumerated().map {
                OutboxItem(
                    id: Int64($0.offset), kind: $0.element.0, key: $0.element.1, payload: $0.element.2, attempts: 0, createdAtMs: 0,
                    nextAttemptAtMs: 0, lastError: nil)
            }
        }
    }
    func settleOutbox(_ item: OutboxItem, delivered: Bool, nextAttemptAtMs: Int64, lastError: String?) async throws {
        guard delivered else { return }
        ledger.withLockedValue { ledger in
            ledger.finishes.removeAll { $0 == item.key }
            ledger.consumptionAnswers.removeAll { $0.key == item.key }
        }
    }
    func releaseOutbox(_ items: [OutboxItem], nowMs: Int64) async throws {}  // nothing is leased here
    // The event feed in memory: what the rules appended, read back in order; webhooks are the engines' (not faked).
    func events(after: EventPosition, limit: Int, accountId: String?, types: [FulfillmentEventType]?) async throws -> [FulfillmentEvent] {
        ledger.withLockedValue { l in
            Array(
                l.events.enumerated().map { i, e in
                    var e = e
                    e.cursor = "\(i + 1)"
                    return e
                }.filter { Int64($0.cursor)! > after.id && (accountId == nil || $0.accountId == accountId) && (types?.contains($0.type) ?? true) }
                    .prefix(limit))
        }
    }
    func trimEvents(beforeMs: Int64) async throws -> Int { 0 }
    func trimDeliveryLog(beforeMs: Int64) async throws {}
    func addWebhook(_ webhook: WebhookRecord, maxEndpoints: Int) async throws -> Bool { throw InMemoryUnsupported() }
    func webhooks() async throws -> [WebhookRecord] { [] }
    func webhook(_ id: String) async throws -> WebhookRecord? { nil }
    func webhookBacklog(_ id: String) async throws -> (count: Int, oldestMs: Int64?, lastError: String?) { (0, nil, nil) }
    func rotateWebhookSecret(_ id: String, secret: String, previousUntilMs: Int64) async throws -> Bool { false }
    func setWebhookState(_ id: String, _ state: String, nowMs: Int64, leaseMs: Int64) async throws -> Bool { false }
    func deleteWebhook(_ id: String) async throws -> Bool { false }
    func redeliverWebhook(_ id: String, after: EventPosition, nowMs: Int64, leaseMs: Int64) async throws -> Int { 0 }
    func webhookDeliveries(_ id: String, limit: Int) async throws -> [WebhookDelivery] { [] }
    func dispatchEvents(to webhook: WebhookRecord, limit: Int, nowMs: Int64) async throws -> Int { 0 }
    func dueWebhookItems(endpointId: String, nowMs: Int64, limit: Int, leaseMs: Int64) async throws -> [OutboxItem] { [] }
    func undeliveredEvents(endpointId: String, accountId: String, limit: Int) async throws
        -> (delivered: Int64, generation: Int64, events: [FulfillmentEvent])?
    { nil }
    func settleWebhook(_ settlement: WebhookSettlement, nowMs: Int64) async throws { throw InMemoryUnsupported() }
    func releaseWebhookItem(_ item: OutboxItem, nowMs: Int64) async throws {}

    func playAcknowledgementsOwed(createdBeforeMs: Int64) async throws -> (count: Int, oldestCreatedAtMs: Int64?) { (0, nil) }
    func outbox(limit: Int) async throws -> (items: [OutboxItem], total: Int, oldestCreatedAtMs: Int64?) {
        let items = try await dueOutbox(nowMs: 0, limit: limit)
        return (items, ledger.withLockedValue { $0.finishes.count + $0.consumptionAnswers.count }, items.isEmpty ? nil : 0)
    }
    func extendEntitlement(originalTransactionId: String, expiresAtMs: Int64, nowMs: Int64) async throws -> Bool {
        try ledger.withLockedValue { try GrantRules.extendRenewal(original: originalTransactionId, expiresAtMs: expiresAtMs, nowMs: nowMs, in: $0) }
    }
    func spend(accountId: String, scope: AccountScope, amount: Int64, idempotencyKey: String, memo: String?, nowMs: Int64) async throws
        -> SpendOutcome
    {
        try ledger.withLockedValue {
            try GrantRules.spend(
                Holder(accountId: accountId, scope: scope), amount: amount, idempotencyKey: idempotencyKey, memo: memo,
                nowMs: nowMs, in: $0)
        }
    }
    func notificationWasApplied(_ uuid: String) async throws -> Bool { false }
    func recordAudit(
        action: String, accountId: String?, transactionId: String?, reason: String, credential: String, operatorName: String?, nowMs: Int64
    ) async throws {
        audits.withLockedValue {
            $0.append(
                AuditEntry(
                    id: Int64($0.count + 1), atMs: nowMs, action: action, accountId: accountId, transactionId: transactionId, reason: reason,
                    credential: credential, operatorName: operatorName))
        }
    }
    func audit(accountId: String, limit: Int) async throws -> [AuditEntry] {
        audits.withLockedValue { Array($0.reversed().filter { $0.accountId == accountId }.prefix(limit)) }
    }
    // The support console's reads and adjustments are tested on the real engines only.
    func adjust(_ holder: Holder, delta: Int64, idempotencyKey: String, audit: AuditFacts, nowMs: Int64) async throws -> AdjustOutcome {
        throw InMemoryUnsupported()
    }
    func customer(accountId: String, ledgerLimit: Int, nowMs: Int64) async throws -> FulfillmentGetCustomer.Result {
        throw InMemoryUnsupported()
    }
    func accountId(transactionId: String) async throws -> String? { throw InMemoryUnsupported() }
    func overview(days: Int, nowMs: Int64) async throws -> FulfillmentGetOverview.Result { throw InMemoryUnsupported() }
    func retentionContext(requestIdentifier: String, customerKey: String, environment: String, originalTransactionId: String, nowMs: Int64)
        async throws -> RetentionContext
    {
        throw InMemoryUnsupported()
    }
    func retentionOffersGiven(customerKey: String, environment: String, originalTransactionId: String) async throws -> Set<String> {
        throw InMemoryUnsupported()
    }
    func retentionAnswer(requestIdentifier: String) async throws -> StoredRetentionAnswer? { throw InMemoryUnsupported() }
    func recordRetentionAnswer(_ answer: RetentionAnswerRecord) async throws -> Bool { throw InMemoryUnsupported() }
    func dismiss(notificationUUID: String, reason: String, audit: AuditFacts, nowMs: Int64) async throws -> DismissOutcome {
        throw InMemoryUnsupported()
    }
    func audit(limit: Int) async throws -> [AuditEntry] { audits.withLockedValue { Array($0.reversed().prefix(limit)) } }
    func audit(action: String, transactionId: String, limit: Int) async throws -> [AuditEntry] {
        audits.withLockedValue { Array($0.reversed().filter { $0.action == action && $0.transactionId == transactionId }.prefix(limit)) }
    }
    func recordNotification(_ entry: InboxEntry) async throws -> (entry: InboxEntry, isNew: Bool) {
        inbox.withLockedValue {
            if let old = $0[entry.notificationUUID] { return (old, false) }
            $0[entry.notificationUUID] = entry
            return (entry, true)
        }
    }
    func dueNotifications(nowMs: Int64, limit: Int) async throws -> [InboxEntry] {
        inbox.withLockedValue { Array($0.values.filter { $0.state == .pending && $0.nextAttemptAtMs <= nowMs }.prefix(limit)) }
    }
    func settleNotification(_ uuid: String, state: NotificationState, attempts: Int, nextAttemptAtMs: Int64, lastError: String?, nowMs: Int64)
        async throws
    {
        inbox.withLockedValue {
            $0[uuid]?.state = state
            $0[uuid]?.attempts = attempts
            $0[uuid]?.nextAttemptAtMs = nextAttemptAtMs
            $0[uuid]?.lastError = lastError
        }
    }
    func notification(_ uuid: String) async throws -> InboxEntry? { inbox.withLockedValue { $0[uuid] } }
    func latestAppliedSignedDate(originalTransactionId: String, types: [String]) async throws -> Int64? {
        inbox.withLockedValue {
            $0.values.filter { $0.originalTransactionId == originalTransactionId && $0.state == .applied && types.contains($0.notificationType) }
                .compactMap(\.signedDateMs).max()
        }
    }
    func notifications(state: NotificationState?, limit: Int) async throws -> [InboxEntry] {
        inbox.withLockedValue { Array($0.values.filter { state == nil || $0.state == state }.prefix(limit)) }
    }
    func owner(originalTransactionId: String) async throws -> Holder? { ledger.withLockedValue { $0.owner(original: originalTransactionId) } }
    func balance(accountId: String, scope: AccountScope) async throws -> Wallet {
        ledger.withLockedValue { $0.wallet(Holder(accountId: accountId, scope: scope)) }
    }
    func entitlements(accountId: String, scope: AccountScope, nowMs: Int64) async throws -> (entitlements: [Entitlement], balance: Int64, owed: Int64)
    {
        ledger.withLockedValue {
            let holder = Holder(accountId: accountId, scope: scope)
            let wallet = $0.wallet(holder)
            return (GrantRules.activeEntitlements($0.entitlements(holder, activeAtMs: nowMs)), wallet.balance, wallet.owed)
        }
    }
    func ledger(accountId: String, scope: AccountScope, after: Int64, limit: Int) async throws -> (entries: [LedgerEntry], next: Int64?) {
        ledger.withLockedValue {
            let rows = $0.rows.enumerated().filter { $0.element.holder == Holder(accountId: accountId, scope: scope) && Int64($0.offset + 1) > after }
            return (
                rows.prefix(limit).map {
                    LedgerEntry(
                        id: Int64($0.offset + 1), delta: $0.element.delta, balance: $0.element.balance,
                        kind: $0.element.kind, transactionId: $0.element.transactionId, memo: $0.element.memo,
                        createdAtMs: $0.element.createdAtMs)
                }, nil
            )
        }
    }
    func entitlement(originalTransactionId: String) async throws -> EntitlementRecord? {
        ledger.withLockedValue { $0.entitlement(original: originalTransactionId) }
    }
    func recordContentDelivery(accountId: String, scope: AccountScope, contentId: String, nowMs: Int64) async throws {
        deliveries.withLockedValue { _ = $0.insert("\(accountId) \(scope.rawValue) \(contentId)") }
    }
    func deliveredContent(accountId: String, scope: AccountScope) async throws -> Set<String> {
        let prefix = "\(accountId) \(scope.rawValue) "
        return Set(deliveries.withLockedValue { $0 }.filter { $0.hasPrefix(prefix) }.map { String($0.dropFirst(prefix.count)) })
    }
    /// Owes an item as a commit would (tests of the outbox's delivery rules).
    func owe(_ kind: OutboxKind, key: String, payload: String, nowMs: Int64) {
        ledger.withLockedValue { $0.enqueueOutbox(kind: kind, key: key, payload: payload, nowMs: nowMs) }
    }
    func close() throws {}
    var rowCount: Int { ledger.withLockedValue { $0.rows.count } }
}

/// Canned answers from accounts, verification and catalog: a verified JWS is its payload in the clear
/// (`fake.<json>`), anything else is refused; one session; two products.
struct FakeDependencies: FulfillmentDependencies {
    static let session = "s", accountId = "acct", token = "aaaaaaaa-0000-0000-0000-000000000000"
    var catalogDown = false

    static func jws(_ id: String, product: String = "coins.100", environment: String = "Production") -> String {
        #"fake.{"transactionId":"\#(id)","originalTransactionId":"\#(id)","productId":"\#(product)","environment":"\#(environment)","purchaseDate":1}"#
    }

    func authenticate(_ session: String) async throws(RPCError) -> AuthenticatedAccount {
        guard session == Self.session else { throw RPCError.unauthenticated() }
        return AuthenticatedAccount(accountId: Self.accountId, username: "u", appAccountToken: Self.token, expiresAtMs: .max)
    }
    func account(appAccountToken: String, internalToken: String) async throws(RPCError) -> String? {
        appAccountToken == Self.token ? Self.accountId : nil
    }
    func verifyReceipt(_ params: VerificationVerifyReceipt.Params) async throws(RPCError) -> VerifyReceiptResponse {
        VerifyReceiptResponse(status: 21003, reason: "untrustedChain")
    }
    func verifyTransaction(_ jws: String) async throws(RPCError) -> VerificationVerifyTransaction.Result {
        guard jws.hasPrefix("fake."), let payload = try? JSONValue.parse(String(jws.dropFirst(5))) else {
            return .init(status: 21003, reason: "signatureInvalid")
        }
        return .init(status: 0, environment: payload["environment"]?.stringValue, transaction: payload)
    }
    func lookUpOrder(_ orderId: String, internalToken: String) async throws(RPCError) -> [VerificationVerifyTransaction.Result] {
        throw RPCError.unavailable("not in the fast tests")
    }
    func transactionInfo(_ transactionId: String, internalToken: String) async throws(RPCError) -> VerificationVerifyTransaction.Result {
        throw RPCError.unavailable("not in the fast tests")
    }
    func transactionHistory(_ transactionId: String, internalToken: String) async throws(RPCError) -> [VerificationVerifyTransaction.Result] {
        throw RPCError.unavailable("not in the fast tests")
    }
    func verifyNotification(_ payload: String) async throws(RPCError) -> VerificationVerifyNotification.Result {
        .init(status: 21003, reason: "signatureInvalid")
    }
    func account(username: String, internalToken: String) async throws(RPCError) -> AccountsFindByUsername.Result {
        throw RPCError.unavailable("not in the fast tests")
    }
    func setAppAccountToken(originalTransactionId: String, appAccountToken: String, internalToken: String) async throws(RPCError) {
        throw RPCError.unavailable("not in the fast tests")
    }
    /// Apple knows every transaction but those named `unknown...`; `down...` ones meet an outage.
    func finishTransaction(_ transactionId: String, internalToken: String) async throws(RPCError) {
        if transactionId.hasPrefix("unknown") { throw RPCError.notFound("Apple has nothing for \(transactionId)", reason: "transactionNotFound") }
        if transactionId.hasPrefix("down") { throw RPCError.unavailable("the App Store Server API answered HTTP 503") }
    }
    func extendRenewalDate(_ params: VerificationExtendRenewalDate.Params) async throws(RPCError) -> VerificationExtendRenewalDate.Result {
        throw RPCError.unavailable("not in the fast tests")
    }
    func notificationHistory(_ params: VerificationNotificationHistory.Params) async throws(RPCError) -> VerificationNotificationHistory.Result {
        throw RPCError.unavailable("not in the fast tests")
    }
    func subscriptionStatuses(_ transactionId: String, internalToken: String) async throws(RPCError) -> [AppleSubscriptionStatus] {
        throw RPCError.unavailable("not in the fast tests")
    }
    func consumptionProfile(accountId: String, internalToken: String) async throws(RPCError) -> AccountsConsumptionProfile.Result {
        throw RPCError.unavailable("not in the fast tests")
    }
    func appleCustomer(accountId: String, internalToken: String) async throws(RPCError) -> [AppTransactionLink] { [] }
    func revokeSessions(accountId: String, internalToken: String) async throws(RPCError) -> Int {
        throw RPCError.unavailable("not in the fast tests")
    }
    func massExtendRenewalDate(_ params: VerificationMassExtendRenewalDate.Params) async throws(RPCError)
        -> VerificationMassExtendRenewalDate.Result
    {
        throw RPCError.unavailable("not in the fast tests")
    }
    func massExtensionStatus(_ params: VerificationMassExtensionStatus.Params) async throws(RPCError) -> MassExtensionStatus {
        throw RPCError.unavailable("not in the fast tests")
    }
    func verifyRealtimeRequest(_ payload: String) async throws(RPCError) -> VerificationVerifyRealtimeRequest.Result {
        throw RPCError.unavailable("not in the fast tests")
    }
    func retention(productId: String, internalToken: String) async throws(RPCError) -> CatalogGetRetention.Result {
        throw RPCError.unavailable("not in the fast tests")
    }
    /// Apple takes every answer but for `refused...` transactions (a 400 with Apple's code) and `old-verification...` ones
    /// (a verification service that cannot read the body: no Apple code); `down...` meet an outage. Sent ones are kept.
    static let consumptionSent = NIOLockedValueBox<[String]>([])
    func sendConsumption(_ params: VerificationSendConsumption.Params) async throws(RPCError) {
        let id = params.transactionId
        if id.hasPrefix("refused") {
            var refused = RPCError.invalidParams("Apple refused the request", field: "transactionId", reason: "appleBadRequest")
            refused.data.extra["appleErrorCode"] = .int(4_000_209)
            throw refused
        }
        if id.hasPrefix("old-verification") { throw RPCError.invalidParams("consumption: not a ConsumptionRequest", reason: "wrongType") }
        if id.hasPrefix("down") { throw RPCError.unavailable("the App Store Server API answered HTTP 503") }
        Self.consumptionSent.withLockedValue { $0.append(id) }
    }
    func products(_ ids: [String]) async throws(RPCError) -> CatalogGetProducts.Result {
        if catalogDown { throw RPCError.unavailable("catalog could not answer", reason: "dependencyUnavailable") }
        let known: [String: Product] = [
            "coins.100": Product(
                productId: "coins.100", type: .consumable, referenceName: "c", title: "c", description: "c", status: .active,
                grant: .coins(100))
        ]
        return .init(products: ids.compactMap { known[$0] }, missing: ids.filter { known[$0] == nil })
    }
}

/// The fulfillment service's decisions with its dependencies and storage faked: milliseconds, no
/// sockets, no database. The same paths run against the real suite in the end-to-end tests.
@Suite struct FastFulfillmentTests {
    static func service(
        _ storage: InMemoryStorage, dependencies: FakeDependencies = FakeDependencies(), clock: ManualClock = ManualClock(),
        configure: (inout FulfillmentConfiguration) -> Void = { _ in }
    ) -> FulfillmentService {
        var config = FulfillmentConfiguration()
        configure(&config)
        var logger = Logger(label: "fast-fulfillment")
        logger.logLevel = .critical
        return FulfillmentService(
            store: storage, dependencies: dependencies,
            content: ContentLibrary(directory: FileManager.default.temporaryDirectory), configuration: config,
            clock: clock.clock, logger: logger)
    }

    /// What Apple refuses for good is let go; what it may answer differently later stays owed. A tie (Set App Account Token)
    /// refused with a 400 (a family member's transaction, 4000185) goes; a tie Apple does not find (404) is asked again;
    /// a consumption answer goes on a 404 too, but not on Apple's codes that say to retry.
    @Test func onlyWhatAppleRefusesForGoodLeavesTheOutbox() {
        func apple(_ code: Int64?, notFound: Bool) -> RPCError {
            var e =
                notFound
                ? RPCError.notFound("not found", reason: "transactionNotFound") : RPCError.invalidParams("refused", reason: "appleBadRequest")
            if let code { e.data.extra["appleErrorCode"] = .int(code) }
            return e
        }
        let tie = "appAccountToken", consumption = "consumptionInformation"
        #expect(OutboxDelivery.refusedForGood(apple(4_000_185, notFound: false), kind: tie))
        #expect(!OutboxDelivery.refusedForGood(apple(4_040_010, notFound: true), kind: tie))
        #expect(!OutboxDelivery.refusedForGood(apple(4_040_006, notFound: true), kind: tie))
        #expect(!OutboxDelivery.refusedForGood(apple(nil, notFound: false), kind: tie), "no Apple code: not Apple's word")
        #expect(OutboxDelivery.refusedForGood(apple(4_040_010, notFound: true), kind: consumption))
        #expect(!OutboxDelivery.refusedForGood(apple(4_040_006, notFound: true), kind: consumption))
        #expect(OutboxDelivery.refusedForGood(apple(4_000_209, notFound: false), kind: consumption))
        #expect(!OutboxDelivery.refusedForGood(apple(4_000_185, notFound: false), kind: "finishTransaction"))
    }

    /// A finish Apple answers "not found" (another app's transaction, for this server's key) is done with: asking again
    /// cannot change it. A finish that meets an outage stays owed.
    @Test func aFinishAppleDoesNotKnowIsDoneWithAndOneThatFailsStaysOwed() async throws {
        let storage = InMemoryStorage()
        let service = Self.service(storage) { $0.internalToken = "internal" }
        let result = try await service.redeem(
            .init(
                session: FakeDependencies.session,
                signedTransactions: ["t1", "unknown1", "down1"].map { FakeDependencies.jws($0) }), mode: .redeem)
        #expect(result.results.map(\.outcome) == [.granted, .granted, .granted])
        let owed = try await storage.outbox(limit: 10).items.map(\.key)
        #expect(Set(owed) == ["t1", "unknown1", "down1"], "\(owed)")
        #expect(try await service.outbox.deliverOutbox() == 3)
        #expect(try await storage.outbox(limit: 10).items.map(\.key) == ["down1"])
    }

    /// A consumption answer is sent while Apple's window lasts, dropped after it and when Apple refuses it for good (its
    /// own error code), and kept owed when the refusal is not Apple's (an older verification service) or Apple is down.
    @Test func aConsumptionAnswerIsSentInItsWindowAndDroppedOnlyOnApplesRefusalOrAfterIt() async throws {
        let storage = InMemoryStorage()
        let clock = ManualClock()
        let service = Self.service(storage, clock: clock) { $0.internalToken = "internal" }
        let now = clock.nowMs
        func owe(_ key: String, deadline: Int64) throws {
            let answer = OwedConsumptionAnswer(
                request: .init(customerConsented: true, deliveryStatus: .delivered, sampleContentProvided: false, consumptionPercentage: 5),
                deadlineMs: deadline)
            storage.owe(.consumptionInformation, key: key, payload: String(decoding: try JSONEncoder().encode(answer), as: UTF8.self), nowMs: now)
        }
        try owe("in-window-1", deadline: now + 3_600_000)
        try owe("late-1", deadline: now - 1)
        try owe("refused-1", deadline: now + 3_600_000)
        try owe("old-verification-1", deadline: now + 3_600_000)
        try owe("down-c1", deadline: now + 3_600_000)
        storage.owe(.consumptionInformation, key: "garbled-1", payload: "{", nowMs: now)
        #expect(try await service.outbox.deliverOutbox() == 6)
        #expect(FakeDependencies.consumptionSent.withLockedValue { $0 }.filter { $0.hasSuffix("-1") || $0.hasSuffix("c1") } == ["in-window-1"])
        #expect(Set(try await storage.outbox(limit: 10).items.map(\.key)) == ["old-verification-1", "down-c1"])
    }

    /// The worker takes one outbox batch per step, the inbox's due notifications between batches: a backlog of finishes
    /// (paced at Apple's rate) never keeps it from notifications due again.
    @Test func theWorkerDeliversOneOutboxBatchAStep() async throws {
        let storage = InMemoryStorage()
        let service = Self.service(storage) {
            $0.internalToken = "internal"
            $0.finishesPerSecond = 1_000
        }
        for part in [0..<75, 75..<150] {  // at most 100 a redeem
            _ = try await service.redeem(
                .init(session: FakeDependencies.session, signedTransactions: part.map { FakeDependencies.jws("\(3_000_000 + $0)") }),
                mode: .redeem)
        }
        #expect(try await storage.outbox(limit: 500).total == 150)
        var quiet = Logger(label: "worker")
        quiet.logLevel = .critical
        let worker = InboxWorker(service: service, logger: quiet)
        #expect(await worker.step(), "a whole batch: more is due")
        #expect(try await storage.outbox(limit: 500).total == 50, "one batch, then the inbox's turn")
        #expect(await worker.step() == false)
        #expect(try await storage.outbox(limit: 500).total == 0)
    }

    @Test func redeemGrantsOnceRejectsForgeriesAndKeepsUnknownProductsUnfinished() async throws {
        let storage = InMemoryStorage()
        let service = Self.service(storage)
        let result = try await service.redeem(
            .init(
                session: FakeDependencies.session,
                signedTransactions: [
                    FakeDependencies.jws("t1"), "forged.jws.value", FakeDependencies.jws("t2", product: "gone"),
                ]), mode: .redeem)
        #expect(result.results.map(\.outcome) == [.rejected, .granted, .unknownProduct])
        #expect(result.results.map(\.finishable) == [false, true, false])
        #expect(result.balance == 100)
        let again = try await service.redeem(
            .init(session: FakeDependencies.session, signedTransactions: [FakeDependencies.jws("t1")]),
            mode: .redeem)
        #expect(again.results.map(\.outcome) == [.alreadyGranted] && again.balance == 100)
    }

    @Test func theSandboxPolicyDecidesWhereASandboxPurchaseGoes() async throws {
        let sandbox = FakeDependencies.jws("s1", environment: "Sandbox")
        let isolated = try await Self.service(InMemoryStorage()).redeem(
            .init(session: FakeDependencies.session, signedTransactions: [sandbox]),
            mode: .redeem)
        #expect(isolated.environment == .sandbox && isolated.balance == 100)
        let refused = try await Self.service(InMemoryStorage()) { $0.sandboxPolicy = .refuse }
            .redeem(.init(session: FakeDependencies.session, signedTransactions: [sandbox]), mode: .redeem)
        #expect(refused.results.map(\.outcome) == [.wrongEnvironment] && refused.balance == 0)
        let granted = try await Self.service(InMemoryStorage()) { $0.sandboxPolicy = .grant }
            .redeem(.init(session: FakeDependencies.session, signedTransactions: [sandbox]), mode: .redeem)
        #expect(granted.environment == .production && granted.balance == 100)
    }

    @Test func nothingIsWrittenWhenADependencyCannotAnswerOrTheCallerIsUnknown() async throws {
        let storage = InMemoryStorage()
        let down = Self.service(storage, dependencies: FakeDependencies(catalogDown: true))
        let failure = await rpcError {
            try await down.redeem(.init(session: FakeDependencies.session, signedTransactions: [FakeDependencies.jws("t1")]), mode: .redeem)
        }
        #expect(failure?.knownCode == .unavailable && failure?.retryable == true)
        let stranger = await rpcError {
            try await Self.service(storage).redeem(.init(session: "nobody", signedTransactions: [FakeDependencies.jws("t1")]), mode: .redeem)
        }
        #expect(stranger?.knownCode == .unauthenticated)
        #expect(storage.rowCount == 0)
    }

    @Test func spendsAreIdempotentAndNeverGoBelowZero() async throws {
        let storage = InMemoryStorage()
        let service = Self.service(storage)
        _ = try await service.redeem(.init(session: FakeDependencies.session, signedTransactions: [FakeDependencies.jws("t1")]), mode: .redeem)
        let spend = FulfillmentSpendCoins.Params(session: FakeDependencies.session, amount: 60, idempotencyKey: "k")
        #expect(try await service.spend(spend).balance == 40)
        #expect(try await service.spend(spend).balance == 40, "a replay answers the first result")
        #expect(
            await rpcError { try await service.spend(.init(session: FakeDependencies.session, amount: 41, idempotencyKey: "k2")) }?
                .knownCode == .insufficientFunds)
    }
}
