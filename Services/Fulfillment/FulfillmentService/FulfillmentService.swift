import Crypto
import Foundation
import IAPProtocol
import JSONRPC
import Logging
import NIOConcurrencyHelpers
import Receipts
import ServiceSupport

/// Turns verified purchases into what the person bought, exactly once: coins in the ledger,
/// entitlements, content. Asks accounts who the caller is, verification whether the purchase is real
/// and catalog what each product grants, then commits everything in one SQLite transaction.
///
/// Nothing is written until every dependency has answered; a dependency that cannot answer makes the
/// call fail with `unavailable` (retryable). Every write is safe to retry: transactions are unique,
/// spends carry idempotency keys.
public final class FulfillmentService: Sendable {
    let store: any FulfillmentStorage
    let dependencies: any FulfillmentDependencies
    let content: ContentLibrary
    let configuration: FulfillmentConfiguration
    let clock: ServiceClock
    let logger: Logger
    /// The reconciliation in progress, if any (`reconcile`): one at a time, joined by whoever asks meanwhile.
    let reconciliation = NIOLockedValueBox<(id: Int, run: Task<FulfillmentReconcile.Result, any Error>)?>(nil)
    let reconciliations = NIOLockedValueBox(0)
    /// Notifications recorded by `receiveNotification {processLater}` wait here for the four processors; when it
    /// is full they are left `pending` and due now, for the inbox worker.
    let laterQueue: AsyncStream<InboxEntry>.Continuation
    let laterEntries: AsyncStream<InboxEntry>
    /// What products grant, as the catalog said a moment ago.
    let grantRuleCache: GrantRuleCache
    let playCatalogCache: CatalogAnswerCache<[PlayCatalogEntry]>
    /// Each account's budget of App Store Server API calls (`FulfillmentConfiguration.appleCallBurst`).
    let appleCalls: TokenBuckets
    /// Wakes the background worker when a commit owes something to an outside party (`OutboxItem`).
    public let outboxWakeup = Wakeup()
    /// Wakes the webhook worker early (an endpoint added, resumed or redelivered).
    public let webhookWakeup = Wakeup()
    /// Sends webhook deliveries (its clients are shut down with the worker).
    public let webhookSender: WebhookSender
    /// Spaces Finish Transaction calls at Apple's documented rate (`FulfillmentConfiguration.finishesPerSecond`).
    let finishPace: Pace
    /// Apple customers' subscriptions read for offers, a minute each.
    let appleHistoryCache = AppleAnswerCache<[SubscriptionHistoryRecord]>(lifetimeMs: 60_000)
    /// The appAccountToken Apple holds for a receipt purchase's original ("" for none), ten minutes each: set at
    /// purchase, and later only by the tie, which never overwrites one.
    let receiptTokenCache = AppleAnswerCache<String>(lifetimeMs: 600_000)
    /// Receipt purchases being looked up at Apple right now (concurrent redeems share the call).
    let receiptTokenLookups: ReceiptTokenLookups

    public init(
        store: any FulfillmentStorage, dependencies: any FulfillmentDependencies, content: ContentLibrary,
        configuration: FulfillmentConfiguration = .init(), clock: ServiceClock = .system, logger: Logger
    ) {
        self.store = store
        self.dependencies = dependencies
        self.content = content
        self.configuration = configuration
        self.clock = clock
        self.logger = logger
        self.grantRuleCache = GrantRuleCache(settings: .init(lifetime: .milliseconds(max(0, configuration.catalogCacheMs))))
        self.playCatalogCache = CatalogAnswerCache(settings: .init(lifetime: .milliseconds(max(0, configuration.catalogCacheMs))))
        self.appleCalls = TokenBuckets(
            burst: Double(configuration.appleCallBurst), perSecond: configuration.appleCallsPerMinute / 60,
            now: { Double(clock.nowMs) / 1000 })
        self.receiptTokenLookups = ReceiptTokenLookups(answers: receiptTokenCache)
        self.finishPace = Pace(perSecond: configuration.finishesPerSecond)
        self.webhookSender = WebhookSender(
            timeout: .milliseconds(configuration.webhooks.requestTimeoutMs), connectionsPerEndpoint: configuration.webhooks.concurrency)
        let (stream, continuation) = AsyncStream<InboxEntry>.makeStream(bufferingPolicy: .bufferingOldest(1_000))
        self.laterQueue = continuation
        self.laterEntries = stream
    }

    deinit { laterQueue.finish() }

    /// Processes the notifications recorded with `processLater`, four at a time (processing mostly waits on the App
    /// Store Server API), until the task is cancelled. The executable runs it inside `InboxWorker` (so the service
    /// group starts and stops it); a notification it has not reached when it stops stays `pending` in the inbox, due
    /// for the worker.
    public func processLaterQueue() async {
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    for await entry in self.laterEntries { _ = await self.notifications.process(entry) }
                }
            }
        }
    }

    // MARK: redeem / restore

    public func redeem(_ p: RedeemParams, mode: FulfillmentMode) async throws(RPCError) -> RedeemResult {
        let receipt = p.receiptData.flatMap { $0.isEmpty ? nil : $0 }
        let signed = p.signedTransactions ?? []
        let transactionIds = p.transactionIds ?? []
        let googlePlay = p.googlePlay ?? []
        guard receipt != nil || !signed.isEmpty || !transactionIds.isEmpty || p.transactionId != nil || !googlePlay.isEmpty else {
            throw RPCError.invalidParams(
                "receiptData, signedTransactions, transactionIds (redeem), transactionId (restore) or googlePlay is required",
                field: "receiptData", reason: "missingField")
        }
        try Self.checkPlay(googlePlay, max: configuration.appleCallBurst)
        guard signed.count <= configuration.maxSignedTransactions, transactionIds.count <= configuration.maxSignedTransactions else {
            throw RPCError.invalidParams(
                "at most \(configuration.maxSignedTransactions) signed transactions or transaction ids per call",
                field: signed.count > configuration.maxSignedTransactions ? "signedTransactions" : "transactionIds", reason: "tooMany")
        }
        if mode == .redeem, p.transactionId != nil {
            throw RPCError.invalidParams(
                "transactionId (a whole history) is for restore; redeem takes transactionIds", field: "transactionId", reason: "restoreOnly")
        }
        if transactionIds.count > configuration.appleCallBurst {
            throw RPCError.invalidParams(
                "at most \(configuration.appleCallBurst) transaction ids per call (each is a call to Apple)", field: "transactionIds",
                reason: "tooMany")
        }
        if mode == .restore, !transactionIds.isEmpty {
            throw RPCError.invalidParams(
                "transactionIds is for redeem; restore takes one transactionId and reads the whole history", field: "transactionIds",
                reason: "redeemOnly")
        }
        for id in transactionIds + (p.transactionId.map { [$0] } ?? []) where !Self.isTransactionId(id) {
            throw RPCError.invalidParams("transaction ids are 1-32 digits", field: "transactionIds", reason: "invalidValue")
        }
        // Who first: an unknown session costs no verification work.
        let account = try await dependencies.authenticate(p.session)
        var purchases: [VerifiedPurchase] = []
        var rejected: [TransactionResult] = []
        if let receipt {
            let fromReceipt = try await verifiedReceipt(receipt, deviceIdentifier: p.deviceIdentifier)
            purchases += try await withTokensHeldAtApple(fromReceipt, accountId: account.accountId)
        }
        if !signed.isEmpty {
            let (verified, refused) = try await verifiedTransactions(signed)
            purchases += verified
            rejected += refused
        }
        if !transactionIds.isEmpty || p.transactionId != nil {
            let (verified, refused) = try await fromApple(
                transactionIds: transactionIds, history: p.transactionId, accountId: account.accountId,
                appAccountToken: account.appAccountToken)
            purchases += verified
            rejected += refused
        }
        if !googlePlay.isEmpty {
            let (verified, refused) = try await verifiedPlayPurchases(googlePlay, accountId: account.accountId)
            purchases += verified
            rejected += refused
        }
        let (planned, wrongEnvironment) = try await plan(purchases)
        rejected += wrongEnvironment
        let answerScope = p.environment ?? planned.first?.scope ?? .production
        let toApply = planned
        // What the grant owes Apple (`AppleFollowUps`: the ties that make Apple's later notifications name the account,
        // Finish Transaction for what was recorded) is recorded in the outbox in the grant's own transaction (never lost,
        // no second commit) and delivered by the outbox worker (`deliverOutbox`), woken right after this commit, out of
        // the request path.
        let applied = try await storeCall {
            try await self.store.apply(
                toApply, accountId: account.accountId, appAccountToken: account.appAccountToken, owed: self.owesApple, mode: mode,
                policy: self.configuration.ownershipPolicy, answerScope: answerScope, nowMs: self.clock.nowMs)
        }
        if applied.owesApple { outboxWakeup.signal() }
        for t in applied.transfers {
            logger.notice(
                "entitlement transferred under the transfer policy",
                metadata: [
                    "originalTransactionId": "\(t.originalTransactionId)", "fromAccountId": "\(t.from)", "toAccountId": "\(account.accountId)",
                ])
        }
        return RedeemResult(
            accountId: account.accountId, results: rejected + applied.results, balance: applied.balance,
            entitlements: applied.entitlements, owed: applied.owed, environment: answerScope)
    }

    func verifiedReceipt(_ receiptData: String, deviceIdentifier: String?) async throws(RPCError) -> [VerifiedPurchase] {
        let answer = try await dependencies.verifyReceipt(.init(receiptData: receiptData, deviceIdentifier: deviceIdentifier))
        guard answer.status == 0 else {
            if Self.isAppleOutage(answer.status) {
                throw RPCError.unavailable(
                    "the receipt could not be verified right now (status \(answer.status)); retry later",
                    reason: "verificationUnavailable")
            }
            throw RPCError.invalidReceipt(
                status: answer.status, reason: answer.reason ?? "invalidReceipt",
                detail: "the receipt failed verification (status \(answer.status)\(answer.reason.map { ", \($0)" } ?? ""))")
        }
        return try VerifiedPurchase.fromReceipt(answer)
    }

    /// What grants owe Apple: nothing without the internal token the worker needs to reach Apple (nothing would ever
    /// take it out of the outbox); Finish Transaction unless the operator turned it off (`finishAtApple`).
    var owesApple: AppleFollowUps {
        guard configuration.internalToken != nil else { return [] }
        return configuration.finishAtApple ? [.ties, .finishes, .playAcknowledgements] : [.ties, .playAcknowledgements]
    }

    static func isTransactionId(_ id: String) -> Bool { (1...32).contains(id.utf8.count) && id.utf8.allSatisfy { $0 >= 48 && $0 <= 57 } }

    /// Purchases fetched from Apple by transaction id (each one), or a customer's whole history (restore),
    /// through verification's App Store Server API methods: only verified transactions are acted upon.
    ///
    /// A transaction id is an identifier, not a proof of purchase (ids are sequential and show up in
    /// support mail): anyone could send another customer's. So only purchases the app made with THIS
    /// account's `appAccountToken` are taken, or, without a token at Apple, of an original this account holds here
    /// already (bound by its receipt before Apple had a token for it: its renewals since come back with it); any other is
    /// `rejected` (not finishable) and can still be redeemed with its receipt or signed transaction, which only the
    /// buyer's device holds.
    func fromApple(transactionIds: [String], history: String?, accountId: String, appAccountToken: String) async throws(RPCError)
        -> ([VerifiedPurchase], [TransactionResult])
    {
        let cost = Double(transactionIds.count + (history == nil ? 0 : configuration.appleHistoryCost))
        if let wait = appleCalls.take(accountId, cost: cost) {
            throw RPCError.rateLimited(
                retryAfterMs: Int64((wait * 1000).rounded(.up)), detail: "this account's budget of calls to Apple is spent")
        }
        guard let token = configuration.internalToken else {
            throw RPCError(
                code: .unavailable,
                message: "redeeming by transaction id needs the internal token (--internal-token) and the App Store Server API on verification",
                reason: .appStoreAPINotConfigured)
        }
        var answers: [(String, VerificationVerifyTransaction.Result?)] = []
        for id in transactionIds {
            do {
                answers.append((id, try await dependencies.transactionInfo(id, internalToken: token)))
            } catch  where error.knownCode == .notFound || error.knownCode == .invalidReceipt {
                answers.append((id, nil))
            }
        }
        if let history {
            for answer in try await dependencies.transactionHistory(history, internalToken: token) { answers.append((history, answer)) }
        }
        var verified: [VerifiedPurchase] = []
        var rejected: [TransactionResult] = []
        var holdsHere: [String: Bool] = [:]  // a history's renewals share their original: asked once each
        for (id, answer) in answers {
            if let answer, answer.status == 0, let payload = answer.transaction,
                let purchase = VerifiedPurchase.fromSignedTransaction(payload, environment: answer.environment)
            {
                var ours = purchase.appAccountToken?.lowercased() == appAccountToken.lowercased()
                if purchase.appAccountToken == nil {
                    let original = purchase.originalTransactionId
                    if holdsHere[original] == nil {
                        holdsHere[original] =
                            try await storeCall { try await self.store.owner(originalTransactionId: original) }?.accountId == accountId
                    }
                    ours = holdsHere[original] ?? false
                }
                guard ours else {
                    // Another customer's purchase: nothing of what Apple said goes back (ids and products are theirs).
                    // An id the caller asked for is answered `rejected`; another customer's history is left out.
                    if id != history {
                        rejected.append(
                            TransactionResult(transactionId: id, originalTransactionId: "", productId: "", outcome: .rejected, finishable: false))
                    }
                    continue
                }
                verified.append(purchase)
            } else {
                rejected.append(TransactionResult(transactionId: id, originalTransactionId: "", productId: "", outcome: .rejected, finishable: false))
            }
        }
        return (verified.sorted { ($0.purchaseDateMs, $0.transactionId) < ($1.purchaseDateMs, $1.transactionId) }, rejected)
    }

    /// 21005 and 21100-21199 are Apple's "try again" statuses.
    static func isAppleOutage(_ status: Int) -> Bool { status == 21005 || (21100...21199).contains(status) }

    /// Verifies every JWS concurrently. One that fails verification is `rejected` (not finishable),
    /// the others go on.
    func verifiedTransactions(_ jwsList: [String]) async throws(RPCError) -> ([VerifiedPurchase], [TransactionResult]) {
        var answers: [VerifyAnswer]
        if jwsList.count == 1 {
            answers = [await verifyOne(jwsList[0])]
        } else {
            answers = await withTaskGroup(of: (Int, VerifyAnswer).self) { group in
                for (i, jws) in jwsList.enumerated() {
                    group.addTask { (i, await self.verifyOne(jws)) }
                }
                var out = [VerifyAnswer](repeating: .failed(RPCError.internalError()), count: jwsList.count)
                for await (i, answer) in group { out[i] = answer }
                return out
            }
        }
        var verified: [VerifiedPurchase] = []
        var rejected: [TransactionResult] = []
        for (i, answer) in answers.enumerated() {
            let result: VerificationVerifyTransaction.Result
            switch answer {
            case .verified(let r): result = r
            case .failed(let error): throw error  // a dependency failure fails the whole call: nothing is written
            }
            if result.status == 0, let payload = result.transaction,
                let purchase = VerifiedPurchase.fromSignedTransaction(payload, environment: result.environment)
            {
                verified.append(purchase)
            } else {
                // Ids shown only to help the caller match its queue; nothing unverified is acted upon.
                let claimed = UnverifiedClaims(jws: jwsList[i])
                rejected.append(
                    TransactionResult(
                        transactionId: claimed.transactionId, originalTransactionId: claimed.originalTransactionId,
                        productId: claimed.productId, outcome: .rejected, finishable: false))
            }
        }
        return (verified.sorted { ($0.purchaseDateMs, $0.transactionId) < ($1.purchaseDateMs, $1.transactionId) }, rejected)
    }

    private enum VerifyAnswer: Sendable {
        case verified(VerificationVerifyTransaction.Result)
        case failed(RPCError)
    }

    private func verifyOne(_ jws: String) async -> VerifyAnswer {
        do {
            return .verified(try await dependencies.verifyTransaction(jws))
        } catch {
            return .failed(error)
        }
    }

    /// Each purchase with what its product grants and the scope the sandbox policy puts it in; ones the
    /// policy refuses come back as `wrongEnvironment` results (not finishable).
    func plan(_ purchases: [VerifiedPurchase]) async throws(RPCError) -> ([PlannedPurchase], [TransactionResult]) {
        let rules = try await grantRules(for: purchases.map(\.productId))
        var planned: [PlannedPurchase] = []
        var refused: [TransactionResult] = []
        for purchase in purchases {
            guard let scope = configuration.sandboxPolicy.scope(forEnvironment: purchase.environment) else {
                refused.append(
                    TransactionResult(
                        transactionId: purchase.transactionId, originalTransactionId: purchase.originalTransactionId,
                        productId: purchase.productId, outcome: .wrongEnvironment, finishable: false))
                continue
            }
            planned.append(.init(purchase: purchase, rule: rules[purchase.productId], scope: scope))
        }
        return (planned, refused)
    }

    /// What the catalog says each product grants; products it does not know map to nil.
    func grantRules(for productIds: [String]) async throws(RPCError) -> [String: GrantRule] {
        try await grantRuleCache.rules(for: productIds) { ids throws(RPCError) in try await dependencies.products(ids).products }
    }

    // MARK: reads

    public func entitlements(_ p: ScopedSessionParams) async throws(RPCError) -> FulfillmentGetEntitlements.Result {
        let account = try await dependencies.authenticate(p.session)
        let scope = p.environment ?? .production
        let read = try await storeCall {
            try await self.store.entitlements(accountId: account.accountId, scope: scope, nowMs: self.clock.nowMs)
        }
        return .init(entitlements: read.entitlements, balance: read.balance, owed: read.owed, environment: scope)
    }

    public func balance(_ p: ScopedSessionParams) async throws(RPCError) -> BalanceResult {
        let account = try await dependencies.authenticate(p.session)
        let scope = p.environment ?? .production
        let wallet = try await storeCall { try await self.store.balance(accountId: account.accountId, scope: scope) }
        return .init(balance: wallet.balance, owed: wallet.owed, environment: scope)
    }

    public func ledger(_ p: FulfillmentListLedger.Params) async throws(RPCError) -> FulfillmentListLedger.Result {
        let after = p.after ?? 0
        guard after >= 0 else { throw RPCError.invalidParams("after must not be negative", field: "after", reason: "invalidValue") }
        let limit = p.limit ?? configuration.defaultLedgerPage
        guard (1...configuration.maxLedgerPage).contains(limit) else {
            throw RPCError.invalidParams("limit must be 1-\(configuration.maxLedgerPage)", field: "limit", reason: "invalidValue")
        }
        let account = try await dependencies.authenticate(p.session)
        let page = try await storeCall {
            try await self.store.ledger(accountId: account.accountId, scope: p.environment ?? .production, after: after, limit: limit)
        }
        return .init(entries: page.entries, next: page.next)
    }

    // MARK: coins

    public func spend(_ p: FulfillmentSpendCoins.Params) async throws(RPCError) -> BalanceResult {
        guard p.amount > 0, p.amount <= configuration.maxSpend else {
            throw RPCError.invalidParams("amount must be 1-\(configuration.maxSpend)", field: "amount", reason: "invalidValue")
        }
        guard !p.idempotencyKey.isEmpty, p.idempotencyKey.utf8.count <= configuration.maxIdempotencyKeyBytes,
            !p.idempotencyKey.hasPrefix(CustomerDesk.adjustmentKeyPrefix)
        else {
            throw RPCError.invalidParams(
                "idempotencyKey must be 1-\(configuration.maxIdempotencyKeyBytes) bytes, not starting with \(CustomerDesk.adjustmentKeyPrefix)",
                field: "idempotencyKey", reason: "invalidValue")
        }
        if let memo = p.memo, memo.utf8.count > configuration.maxMemoBytes {
            throw RPCError.invalidParams("memo is longer than \(configuration.maxMemoBytes) bytes", field: "memo", reason: "tooLong")
        }
        let account = try await dependencies.authenticate(p.session)
        let scope = p.environment ?? .production
        let outcome = try await storeCall {
            try await self.store.spend(
                accountId: account.accountId, scope: scope, amount: p.amount, idempotencyKey: p.idempotencyKey,
                memo: p.memo, nowMs: self.clock.nowMs)
        }
        switch outcome {
        case .spent(let balance), .replayed(let balance): return .init(balance: balance, environment: scope)
        case .insufficient(let balance): throw RPCError.insufficientFunds(balance: balance, requested: p.amount)
        case .owes(let owed, let balance): throw RPCError.debtOutstanding(owed: owed, balance: balance)
        case .keyConflict:
            throw RPCError.conflict("idempotency key \"\(p.idempotencyKey)\" was already used with other params", reason: "idempotencyKeyReused")
        }
    }

    // MARK: helpers

    /// Runs a store call; a database failure is an internal error (retryable: nothing was committed), and
    /// an amount past `CoinLimits` a conflict.
    func storeCall<T: Sendable>(_ body: @Sendable () async throws -> T) async throws(RPCError) -> T {
        let logger = self.logger
        return try await StorageCalls(logger: logger, detail: "the ledger database failed; nothing was committed, retry") { error in
            guard let limit = error as? LedgerLimit else { return nil }
            logger.error("a coin amount is outside the ledger's bounds; nothing was committed", metadata: ["limit": "\(limit)"])
            return RPCError.conflict(
                "a coin amount would exceed the ledger's bounds (CoinLimits); nothing was committed",
                reason: "coinLimitExceeded")
        }.run(body)
    }
}

/// The ids a JWS claims, read without trusting it (for `rejected` results only), through the one JWS
/// decoder (`Receipts`).
struct UnverifiedClaims {
    var transactionId = ""
    var originalTransactionId = ""
    var productId = ""

    init(jws: String) {
        guard let payload = SignedPayloadVerifier.unverifiedPayload(jws),
            let object = try? JSONDecoder().decode(JSONValue.self, from: Data(payload))
        else { return }
        func text(_ key: String) -> String {
            switch object[key] {
            case .string(let s)?: return String(s.prefix(64))
            case .int(let n)?: return String(n)
            default: return ""
            }
        }
        transactionId = text("transactionId")
        originalTransactionId = text("originalTransactionId")
        productId = text("productId")
    }
}
