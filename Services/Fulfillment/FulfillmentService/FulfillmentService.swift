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
    private let content: ContentLibrary
    let configuration: FulfillmentConfiguration
    let clock: ServiceClock
    let logger: Logger
    /// The reconciliation in progress, if any (`reconcile`): one at a time, joined by whoever asks meanwhile.
    private let reconciliation = NIOLockedValueBox<(id: Int, run: Task<FulfillmentReconcile.Result, any Error>)?>(nil)
    private let reconciliations = NIOLockedValueBox(0)
    /// Notifications recorded by `receiveNotification {processLater}` wait here for the four processors; when it
    /// is full they are left `pending` and due now, for the inbox worker.
    private let laterQueue: AsyncStream<InboxEntry>.Continuation
    /// What products grant, as the catalog said a moment ago.
    private let grantRuleCache: GrantRuleCache
    /// Each account's budget of App Store Server API calls (`FulfillmentConfiguration.appleCallBurst`).
    private let appleCalls: TokenBuckets

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
        self.appleCalls = TokenBuckets(
            burst: Double(configuration.appleCallBurst), perSecond: configuration.appleCallsPerMinute / 60,
            now: { Double(clock.nowMs) / 1000 })
        let (stream, continuation) = AsyncStream<InboxEntry>.makeStream(bufferingPolicy: .bufferingOldest(1_000))
        self.laterQueue = continuation
        let queue = stream
        // Processing mostly waits on the App Store Server API: a few at once.
        for _ in 0..<4 {
            Task { [weak self] in
                for await entry in queue {
                    guard let self else { return }
                    _ = await self.process(entry)
                }
            }
        }
    }

    deinit { laterQueue.finish() }

    // MARK: redeem / restore

    public func redeem(_ p: RedeemParams, mode: FulfillmentMode) async throws(RPCError) -> RedeemResult {
        let receipt = p.receiptData.flatMap { $0.isEmpty ? nil : $0 }
        let signed = p.signedTransactions ?? []
        let transactionIds = p.transactionIds ?? []
        guard receipt != nil || !signed.isEmpty || !transactionIds.isEmpty || p.transactionId != nil else {
            throw RPCError.invalidParams(
                "receiptData, signedTransactions, transactionIds (redeem) or transactionId (restore) is required", field: "receiptData",
                reason: "missingField")
        }
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
            purchases += try await verifiedReceipt(receipt, deviceIdentifier: p.deviceIdentifier)
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
        let (planned, wrongEnvironment) = try await plan(purchases)
        rejected += wrongEnvironment
        let answerScope = p.environment ?? planned.first?.scope ?? .production
        let toApply = planned
        // Granted purchases without an appAccountToken are tied to the account at Apple (Set App Account Token), so
        // Apple's later notifications about them name the account: recorded in the outbox in the grant's own
        // transaction (never lost, no second commit), made later by `tieAccountsAtApple`, out of the request path.
        let applied = try await storeCall {
            try await self.store.apply(
                toApply, accountId: account.accountId, appAccountToken: account.appAccountToken, recordTies: self.recordsTies, mode: mode,
                policy: self.configuration.ownershipPolicy, answerScope: answerScope, nowMs: self.clock.nowMs)
        }
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

    private func verifiedReceipt(_ receiptData: String, deviceIdentifier: String?) async throws(RPCError) -> [VerifiedPurchase] {
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

    /// Whether grants record ties to make at Apple: only with the internal token the worker needs to reach Apple
    /// (without it nothing would ever take them out of the outbox).
    private var recordsTies: Bool { configuration.internalToken != nil }

    /// Makes the due ties of the outbox at Apple; answers how many were tried. The executable's worker
    /// calls it every few seconds.
    @discardableResult
    public func tieAccountsAtApple(limit: Int = 100) async throws(RPCError) -> Int {
        guard let internalToken = configuration.internalToken else { return 0 }
        let now = clock.nowMs
        let due = try await storeCall { try await self.store.dueAccountTokens(nowMs: now, limit: limit) }
        for item in due {
            var done = true
            var next: Int64?
            var failure: String?
            do {
                // Never overwrite a token Apple already holds: whoever redeems a copied receipt first owns its purchases
                // here, but the buyer's app set its token when it bought, and Apple's notifications keep following it.
                let current = try await dependencies.transactionInfo(item.originalTransactionId, internalToken: internalToken)
                if let held = current.transaction?["appAccountToken"]?.stringValue, !held.isEmpty {
                    if held.lowercased() != item.appAccountToken {
                        logger.notice(
                            "a purchase redeemed here carries another appAccountToken at Apple; left as Apple has it",
                            metadata: ["originalTransactionId": "\(item.originalTransactionId)"])
                    }
                } else {
                    try await dependencies.setAppAccountToken(
                        originalTransactionId: item.originalTransactionId, appAccountToken: item.appAccountToken, internalToken: internalToken)
                }
            } catch  where error.has(.appStoreAPINotConfigured) {
                // Nothing to tie with until the operator configures the App Store Server API: the items stay due,
                // unchanged, and this pass ends (one question to verification per pass).
                return due.count
            } catch {
                done = false
                failure = error.message
                let (state, at) = configuration.inboxRetry.afterFailure(attempts: item.attempts + 1, nowMs: clock.nowMs)
                next = state == .parked ? nil : at
                logger.log(
                    level: next == nil ? .error : .warning,
                    next == nil
                        ? "gave up tying a purchase to its account at Apple; its notifications are still matched by owner"
                        : "could not tie a purchase to its account at Apple; will retry",
                    metadata: ["originalTransactionId": "\(item.originalTransactionId)", "error": "\(error.message)"])
            }
            let (settleDone, settleNext, settleError) = (done, next, failure)
            try await storeCall {
                try await self.store.settleAccountToken(item, done: settleDone, nextAttemptAtMs: settleNext, lastError: settleError)
            }
        }
        return due.count
    }

    static func isTransactionId(_ id: String) -> Bool { (1...32).contains(id.utf8.count) && id.utf8.allSatisfy { $0 >= 48 && $0 <= 57 } }

    /// Purchases fetched from Apple by transaction id (each one), or a customer's whole history (restore),
    /// through verification's App Store Server API methods: only verified transactions are acted upon.
    ///
    /// A transaction id is an identifier, not a proof of purchase (ids are sequential and show up in
    /// support mail): anyone could send another customer's. So only purchases the app made with THIS
    /// account's `appAccountToken` are taken; any other is `rejected` (not finishable) and can still be
    /// redeemed with its receipt or signed transaction, which only the buyer's device holds.
    private func fromApple(transactionIds: [String], history: String?, accountId: String, appAccountToken: String) async throws(RPCError)
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
        for (id, answer) in answers {
            if let answer, answer.status == 0, let payload = answer.transaction,
                let purchase = VerifiedPurchase.fromSignedTransaction(payload, environment: answer.environment)
            {
                guard purchase.appAccountToken?.lowercased() == appAccountToken.lowercased() else {
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
    private func verifiedTransactions(_ jwsList: [String]) async throws(RPCError) -> ([VerifiedPurchase], [TransactionResult]) {
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
    private func plan(_ purchases: [VerifiedPurchase]) async throws(RPCError) -> ([PlannedPurchase], [TransactionResult]) {
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
    private func grantRules(for productIds: [String]) async throws(RPCError) -> [String: GrantRule] {
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
        guard !p.idempotencyKey.isEmpty, p.idempotencyKey.utf8.count <= configuration.maxIdempotencyKeyBytes else {
            throw RPCError.invalidParams(
                "idempotencyKey must be 1-\(configuration.maxIdempotencyKeyBytes) bytes",
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

    // MARK: content

    /// The scope whose entitlements unlock content: Sandbox ones (TestFlight, Xcode: free to buy) only with
    /// `--sandbox-content`, since one directory serves both and a signed URL is as good as the paid file.
    private func contentScope(_ requested: AccountScope?) throws(RPCError) -> AccountScope {
        let scope = requested ?? .production
        guard scope == .production || configuration.sandboxContent else {
            throw RPCError.forbidden(
                "Sandbox purchases unlock no content on this server (development servers run with --sandbox-content)",
                reason: .sandboxContentDisabled)
        }
        return scope
    }

    public func listContent(_ p: ScopedSessionParams) async throws(RPCError) -> FulfillmentListContent.Result {
        let scope = try contentScope(p.environment)
        let account = try await dependencies.authenticate(p.session)
        var items: [ContentItem] = []
        for (contentId, productId) in try await entitledContent(accountId: account.accountId, scope: scope) {
            guard let info = try await content.info(contentId) else {
                logger.warning("entitled content is not installed", metadata: ["contentId": "\(contentId)"])
                continue
            }
            items.append(ContentItem(contentId: contentId, productId: productId, size: info.size, sha256: info.sha256))
        }
        return .init(content: items)
    }

    public func readContent(_ p: FulfillmentReadContent.Params) async throws(RPCError) -> FulfillmentReadContent.Result {
        guard p.offset >= 0 else { throw RPCError.invalidParams("offset must not be negative", field: "offset", reason: "invalidValue") }
        guard (1...configuration.maxContentChunk).contains(p.length) else {
            throw RPCError.invalidParams("length must be 1-\(configuration.maxContentChunk)", field: "length", reason: "invalidValue")
        }
        let scope = try contentScope(p.environment)
        let account = try await dependencies.authenticate(p.session)
        guard
            try await entitledContent(accountId: account.accountId, scope: scope)
                .contains(where: { $0.contentId == p.contentId })
        else {
            // The same answer whether the content exists or not: no probing of what others bought.
            throw RPCError.forbidden("this account is not entitled to content \(p.contentId)", reason: "notEntitled")
        }
        return try await content.read(p.contentId, offset: p.offset, length: p.length)
    }

    /// A signed URL the edge serves the file at, for an account entitled to it now. A refunded or expired
    /// entitlement gets none; one already issued is good until `expiresAtMs` (minutes), never longer.
    public func contentURL(_ p: FulfillmentContentURL.Params) async throws(RPCError) -> FulfillmentContentURL.Result {
        guard let signer = configuration.contentURLSigner else {
            throw RPCError.unavailable(
                "content URLs are not configured on this server (IAP_CONTENT_URL_KEY); use fulfillment.readContent",
                reason: "contentURLsDisabled")
        }
        let scope = try contentScope(p.environment)
        let account = try await dependencies.authenticate(p.session)
        guard
            try await entitledContent(accountId: account.accountId, scope: scope).contains(where: { $0.contentId == p.contentId })
        else {
            throw RPCError.forbidden("this account is not entitled to content \(p.contentId)", reason: "notEntitled")
        }
        guard let installed = try await content.info(p.contentId) else {
            throw RPCError.notFound("content \(p.contentId) is not installed on this server", reason: "contentMissing")
        }
        let expires = clock.nowMs + configuration.contentURLLifetimeMs
        let path = signer.path(
            for: .init(contentId: p.contentId, accountId: account.accountId, scope: scope.rawValue, expiresAtMs: expires))
        let base = configuration.contentURLBase.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 } ?? ""
        return .init(url: base + path, expiresAtMs: expires, size: installed.size, sha256: installed.sha256)
    }

    /// (contentId, productId) for every content id granted by the account's active entitlements,
    /// as the catalog defines the products now.
    private func entitledContent(accountId: String, scope: AccountScope) async throws(RPCError) -> [(contentId: String, productId: String)] {
        let entitlements = try await storeCall {
            try await self.store.entitlements(accountId: accountId, scope: scope, nowMs: self.clock.nowMs).entitlements
        }
        let productIds = Array(Set(entitlements.map(\.productId))).sorted()
        guard !productIds.isEmpty else { return [] }
        let products = try await dependencies.products(productIds).products
        var out: [(String, String)] = []
        for product in products {
            if case .content(_, let ids) = product.grant { out += ids.map { ($0, product.productId) } }
        }
        return out
    }

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
        let uuid =
            notification["notificationUUID"]?.stringValue
            ?? SHA256.hash(data: Array(p.signedPayload.utf8)).map { String(format: "%02x", $0) }.joined()
        // Applied before the inbox existed (an older version of this service).
        if try await storeCall({ try await self.store.notificationWasApplied(uuid) }) {
            return .init(notificationUUID: uuid, state: .applied, firstDelivery: false)
        }
        let now = clock.nowMs
        let entry = InboxEntry(
            notificationUUID: uuid, notificationType: notification["notificationType"]?.stringValue ?? "",
            subtype: notification["subtype"]?.stringValue, signedDateMs: notification["signedDate"]?.millisecondsValue,
            signedPayload: p.signedPayload, notification: (try? JSONByteEncoder.encode(notification)) ?? [],
            // Leased to this call for a minute: the inbox worker leaves it alone while it is processed here,
            // and picks it up if this process dies first.
            receivedAtMs: now, nextAttemptAtMs: now + configuration.inboxLeaseMs,
            originalTransactionId: notification["data"]?["transactionInfo"]?["originalTransactionId"]?.stringValue)
        let recorded = try await storeCall { try await self.store.recordNotification(entry) }
        guard recorded.isNew else {
            logger.info("notification delivered again", metadata: ["notificationUUID": "\(uuid)", "state": "\(recorded.entry.state)"])
            return .init(notificationUUID: uuid, state: recorded.entry.state, firstDelivery: false)
        }
        if p.processLater == true {
            // Durable already: processed right after this answer, or by the inbox worker once its lease ends.
            if case .dropped = laterQueue.yield(entry) {
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
        let now = clock.nowMs
        let due = try await storeCall { try await self.store.dueNotifications(nowMs: now, limit: limit) }
        for entry in due { _ = await process(entry, reverify: true) }
        return due.count
    }

    /// One processing attempt, its outcome recorded: `applied`, `ignored`, or (failing) `pending` with a
    /// later attempt or `parked`. `reverify`: a row read back from the inbox (the worker, a retry) is verified again
    /// from its signed payload, never taken from the stored copy: an older version may have recorded what today's
    /// rules refuse (Xcode-signed notifications, unsigned nested objects).
    private func process(_ entry: InboxEntry, reverify: Bool = false) async -> NotificationState {
        let attempts = entry.attempts + 1
        do {
            let outcome: ActOutcome
            if reverify {
                let answer = try await dependencies.verifyNotification(entry.signedPayload)
                if answer.status == 0, let notification = answer.notification {
                    outcome = try await act(on: notification, entry: entry)
                } else {
                    outcome = .ignored("it no longer passes verification (status \(answer.status), \(answer.reason ?? "refused"))")
                }
            } else {
                outcome = try await act(on: try JSONValue(parsing: entry.notification), entry: entry)
            }
            let state: NotificationState = outcome.applied ? .applied : .ignored
            let now = clock.nowMs
            if let reason = outcome.reason {
                logger.info("notification ignored", metadata: ["notificationUUID": "\(entry.notificationUUID)", "reason": "\(reason)"])
            }
            try await storeCall {
                try await self.store.settleNotification(
                    entry.notificationUUID, state: state, attempts: attempts, nextAttemptAtMs: now, lastError: outcome.reason, nowMs: now)
            }
            return state
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
            // If even this fails, the row stays pending under its lease and the worker tries again.
            try? await store.settleNotification(
                entry.notificationUUID, state: state, attempts: attempts, nextAttemptAtMs: next, lastError: message, nowMs: now)
            return state
        }
    }

    struct ActOutcome {
        var applied: Bool
        /// Why it was ignored (kept as the inbox row's lastError).
        var reason: String?
        static let applied = ActOutcome(applied: true)
        static func ignored(_ reason: String? = nil) -> ActOutcome { .init(applied: false, reason: reason) }
    }

    /// What a notification does. Its renewal info, when it has one, is kept per original transaction (forward
    /// only by its signed date): auto-renew, billing retry, grace period, expiration intent.
    ///
    /// Apple delivers late, twice and out of order, so a notification about a transaction's standing (refund,
    /// reversal, purchase, renewal) is taken as news that it changed: the transaction is fetched from Apple
    /// (App Store Server API, through verification) and brought to what Apple says NOW, whichever notification
    /// arrives and in whatever order: revoked at Apple -> revoked here (or, never seen here, recorded so that
    /// the redeem bringing it grants nothing); valid -> granted to its account (the original's owner, else the
    /// account of its appAccountToken), or given back if a refund had revoked it. Without the App Store Server
    /// API, the notification's own snapshot is used, and one signed before a notification already applied for
    /// the same purchase is superseded (ignored): state then only moves forward.
    ///
    /// RENEWAL_EXTENDED moves a subscription's end; renewal-state types (DID_CHANGE_RENEWAL_STATUS,
    /// DID_CHANGE_RENEWAL_PREF, DID_FAIL_TO_RENEW, GRACE_PERIOD_EXPIRED, EXPIRED, PRICE_INCREASE) apply their
    /// renewal info (an UPGRADE also grants its new plan's transaction); REFUND_DECLINED is recorded;
    /// CONSUMPTION_REQUEST is answered when the account consented. TEST, EXTERNAL_PURCHASE_TOKEN,
    /// RENEWAL_EXTENSION (a mass extension's summary or failure) and types Apple may add are ignored, the
    /// reason kept (`NotificationDisposition`).
    private func act(on notification: JSONValue, entry: InboxEntry) async throws(RPCError) -> ActOutcome {
        let type = notification["notificationType"]?.stringValue ?? ""
        let disposition = NotificationDisposition.of(type: type, subtype: notification["subtype"]?.stringValue)
        if case .ignore(let reason) = disposition { return .ignored(reason) }
        let data = notification["data"]
        var renewalKept = false
        if let info = data?["renewalInfo"],
            let state = RenewalState(renewalInfo: info, fallbackSignedDateMs: notification["signedDate"]?.millisecondsValue)
        {
            renewalKept = try await storeCall { try await self.store.recordRenewal(state) }
        }
        guard let info = data?["transactionInfo"],
            let snapshot = VerifiedPurchase.fromSignedTransaction(info, environment: data?["environment"]?.stringValue)
        else { return .ignored("no transaction in the notification") }
        let now = clock.nowMs
        let outcome: ActOutcome
        switch disposition {
        case .bringToAppleState:
            let reason = type == "REVOKE" ? "revoked" : "refunded"
            if let current = try await currentFromApple(snapshot.transactionId) {
                outcome = try await bringToAppleState(current, reason: reason, reinstates: true, nowMs: now)
            } else if let superseded = try await supersededReason(entry) {
                outcome = .ignored(superseded)
            } else {
                // From the signed snapshot alone, only a reversal gives back what a refund took: an older purchase or
                // renewal notice arriving late says nothing about a refund that came after it.
                outcome = try await bringToAppleState(snapshot, reason: reason, reinstates: type == "REFUND_REVERSED", nowMs: now)
            }
        case .record:
            outcome = .applied
        case .answerConsumptionRequest:
            let answered = try await answerConsumptionRequest(
                snapshot, signedDateMs: notification["signedDate"]?.millisecondsValue ?? now, nowMs: now)
            outcome = answered ? .applied : .ignored("not answered: no consent, outside Apple's window, or not a purchase made here")
        case .moveSubscriptionEnd:
            guard let expires = snapshot.expiresDateMs else { return .ignored("no expiry") }
            _ = try await storeCall {
                try await self.store.extendEntitlement(originalTransactionId: snapshot.originalTransactionId, expiresAtMs: expires)
            }
            outcome = .applied
        case .keepRenewalState:
            outcome = renewalKept ? .applied : .ignored("an equal or newer renewal state was already kept")
        case .ignore(let reason):
            outcome = .ignored(reason)
        }
        logger.info(
            "notification", metadata: ["type": "\(type)", "transactionId": "\(snapshot.transactionId)", "applied": "\(outcome.applied)"])
        return outcome
    }

    /// The transaction as Apple has it now, verified; nil when this deployment cannot ask Apple (no internal
    /// token or no App Store Server API) or Apple does not know it (then the notification's snapshot serves).
    private func currentFromApple(_ transactionId: String) async throws(RPCError) -> VerifiedPurchase? {
        guard let token = configuration.internalToken else { return nil }
        do {
            let answer = try await dependencies.transactionInfo(transactionId, internalToken: token)
            guard answer.status == 0, let payload = answer.transaction else { return nil }
            return VerifiedPurchase.fromSignedTransaction(payload, environment: answer.environment)
        } catch  where error.has(.appStoreAPINotConfigured) || error.knownCode == .notFound {
            return nil
        }
    }

    /// Without Apple's current word: "superseded" when a notification about a purchase's standing (purchase, renewal,
    /// refund, revocation, reversal) signed later for the same original transaction was already applied (this one
    /// describes an older state). News about renewal preferences or expiry supersedes no refund.
    private func supersededReason(_ entry: InboxEntry) async throws(RPCError) -> String? {
        guard let original = entry.originalTransactionId, let signed = entry.signedDateMs,
            let latest = try await storeCall({
                try await self.store.latestAppliedSignedDate(originalTransactionId: original, types: NotificationDisposition.standingTypes)
            }),
            signed < latest
        else { return nil }
        return "superseded: a later notification for this purchase was applied first"
    }

    /// Makes the purchase here what `purchase` (Apple's word) says: revoked, or granted (given back if a
    /// refund had revoked it). Idempotent: any number of deliveries, in any order, end the same.
    /// `reinstates`: whether a revoked purchase that `purchase` shows valid is given back (Apple's current word, or a
    /// REFUND_REVERSED snapshot).
    private func bringToAppleState(_ purchase: VerifiedPurchase, reason: String, reinstates: Bool, nowMs: Int64) async throws(RPCError)
        -> ActOutcome
    {
        let processed = try await storeCall { try await self.store.processed(transactionId: purchase.transactionId) }
        if purchase.cancellationDateMs != nil {
            if processed != nil {
                _ = try await storeCall { try await self.store.revoke(transactionId: purchase.transactionId, reason: reason, nowMs: nowMs) }
                return .applied
            }
            // Never seen here: remembered, so that the redeem bringing it grants nothing (and a reversal later
            // grants it in full). A refunded renewal of a subscription owned here also takes back the access
            // its original granted.
            if purchase.transactionId != purchase.originalTransactionId,
                try await storeCall({ try await self.store.owner(originalTransactionId: purchase.originalTransactionId) }) != nil
            {
                _ = try await applyFromApple(purchase, nowMs: nowMs)
            }
            try await storeCall { try await self.store.recordEarlyRevocation(transactionId: purchase.transactionId, reason: reason, nowMs: nowMs) }
            return .applied
        }
        if let processed, processed.revokedAtMs != nil {
            guard reinstates else { return .ignored("revoked here; only a refund reversal gives it back") }
            _ = try await storeCall { try await self.store.reinstate(transactionId: purchase.transactionId, nowMs: nowMs) }
            return .applied
        }
        if processed == nil, reinstates {
            // A refund reversed before the purchase was redeemed here: its early revocation no longer holds.
            _ = try await storeCall { try await self.store.reinstate(transactionId: purchase.transactionId, nowMs: nowMs) }
        }
        let outcomes = try await applyFromApple(purchase, nowMs: nowMs)
        return outcomes.isEmpty ? .ignored("its account is not known here (no owner, no matching appAccountToken)") : .applied
    }

    /// Apple asks, after a customer requested a refund, how the purchase was used (CONSUMPTION_REQUEST). Answered
    /// with Send Consumption Information only when the account has consented (`accounts.setConsumptionConsent`),
    /// within Apple's 12-hour window, once (the inbox processes a notification once); otherwise ignored. What is
    /// sent is what this server knows: delivered, how much of a coin grant is left, the account's age band.
    private func answerConsumptionRequest(_ purchase: VerifiedPurchase, signedDateMs: Int64, nowMs: Int64) async throws(RPCError) -> Bool {
        guard let internalToken = configuration.internalToken, nowMs - signedDateMs < configuration.consumptionWindowMs else { return false }
        guard let record = try await storeCall({ try await self.store.processed(transactionId: purchase.transactionId) }) else { return false }
        let profile = try await dependencies.consumptionProfile(accountId: record.holder.accountId, internalToken: internalToken)
        guard profile.consent else {
            logger.info("consumption request not answered: the account has not consented", metadata: ["transactionId": "\(purchase.transactionId)"])
            return false
        }
        let wallet = try await storeCall { try await self.store.balance(accountId: record.holder.accountId, scope: record.holder.scope) }
        let info = AppleConsumptionInfo(
            customerConsented: true,
            consumptionStatus: Self.consumptionStatus(granted: record.coinsGranted, balance: wallet.balance, revoked: record.revokedAtMs != nil),
            platform: 1, sampleContentProvided: false, deliveryStatus: 0, appAccountToken: profile.appAccountToken.lowercased(),
            accountTenure: Self.tenureBand(ageMs: nowMs - profile.createdAtMs), playTime: 0, lifetimeDollarsRefunded: 0,
            lifetimeDollarsPurchased: 0, userStatus: 1, refundPreference: 0)
        try await dependencies.sendConsumption(.init(internalToken: internalToken, transactionId: purchase.transactionId, consumption: info))
        return true
    }

    /// Apple's consumptionStatus for a coin grant: 1 none used (the balance still holds it), 3 all used, 2 some;
    /// 0 (undeclared) for anything else.
    static func consumptionStatus(granted: Int64, balance: Int64, revoked: Bool) -> Int {
        guard granted > 0, !revoked else { return 0 }
        if balance >= granted { return 1 }
        return balance == 0 ? 3 : 2
    }

    /// Apple's accountTenure bands: 1 under 3 days, 2 under 10, 3 under 30, 4 under 90, 5 under 180, 6 under 365, 7 more.
    static func tenureBand(ageMs: Int64) -> Int {
        let days = ageMs / 86_400_000
        for (band, limit) in [(1, 3), (2, 10), (3, 30), (4, 90), (5, 180), (6, 365)] where days < limit { return band }
        return 7
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
        guard [.parked, .pending].contains(entry.state) else { return entry.summary }
        logger.notice("notification retried by an administrator", metadata: ["notificationUUID": "\(p.notificationUUID)"])
        _ = await process(entry, reverify: true)
        guard let after = try await storeCall({ try await self.store.notification(p.notificationUUID) }) else { return entry.summary }
        return after.summary
    }

    /// Records a purchase Apple told us about (a notification, a status) for its account, as a redeem would:
    /// the outcomes, none when the account cannot be known.
    private func applyFromApple(_ purchase: VerifiedPurchase, nowMs: Int64) async throws(RPCError) -> [RedeemOutcome] {
        guard let scope = configuration.sandboxPolicy.scope(forEnvironment: purchase.environment) else { return [] }
        var accountId = try await storeCall { try await self.store.owner(originalTransactionId: purchase.originalTransactionId)?.accountId }
        var token: String?
        if accountId == nil, let appAccountToken = purchase.appAccountToken, let internalToken = configuration.internalToken {
            accountId = try await dependencies.account(appAccountToken: appAccountToken, internalToken: internalToken)
            token = appAccountToken
        }
        guard let accountId else { return [] }
        let rules = try await grantRules(for: [purchase.productId])
        let appAccountToken = token
        let applied = try await storeCall {
            try await self.store.apply(
                [.init(purchase: purchase, rule: rules[purchase.productId], scope: scope)], accountId: accountId,
                appAccountToken: appAccountToken, mode: .redeem, policy: .refuse, answerScope: scope, nowMs: nowMs)
        }
        return applied.results.map(\.outcome)
    }

    public func revokeTransaction(_ p: FulfillmentRevokeTransaction.Params) async throws(RPCError) {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        try Self.checkReason(p.reason, maxBytes: configuration.maxMemoBytes)
        let outcome = try await storeCall {
            try await self.store.revoke(transactionId: p.transactionId, reason: p.reason, nowMs: self.clock.nowMs)
        }
        guard outcome != .notFound else {
            throw RPCError.notFound("transaction \(p.transactionId) was never processed here", reason: "unknownTransaction")
        }
        try await audit("revoke", transactionId: p.transactionId, reason: p.reason, token: p.adminToken)
        logger.notice("transaction revoked by an administrator", metadata: ["transactionId": "\(p.transactionId)", "reason": "\(p.reason)"])
    }

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
    /// default policy), then ties them to the account at Apple. Audited once per granted purchase.
    public func grantOrder(_ p: FulfillmentGrantOrder.Params) async throws(RPCError) -> FulfillmentGrantOrder.Result {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        try Self.checkReason(p.reason, maxBytes: configuration.maxMemoBytes)
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
        let (planned, refused) = try await plan(purchases)
        var results = refused
        let toApply = planned
        let applied = try await storeCall {
            try await self.store.apply(
                toApply, accountId: account.accountId, appAccountToken: account.appAccountToken, recordTies: self.recordsTies,
                mode: .redeem, policy: self.configuration.ownershipPolicy, answerScope: toApply.first?.scope ?? .production,
                nowMs: self.clock.nowMs)
        }
        results += applied.results
        for result in applied.results where [.granted, .restored].contains(result.outcome) {
            try await audit(
                "grantOrder", accountId: account.accountId, transactionId: result.transactionId, reason: "order \(p.orderId): \(p.reason)",
                token: p.adminToken)
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
        guard (1...90).contains(p.days) else { throw RPCError.invalidParams("days must be 1-90", field: "days", reason: "invalidValue") }
        guard (0...3).contains(p.reasonCode) else {
            throw RPCError.invalidParams("reasonCode must be 0-3 (Apple's extendReasonCode)", field: "reasonCode", reason: "invalidValue")
        }
        guard Self.isTransactionId(p.originalTransactionId) else {
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
        _ = try await storeCall { try await self.store.extendEntitlement(originalTransactionId: p.originalTransactionId, expiresAtMs: expires) }
        let owner = try await storeCall { try await self.store.owner(originalTransactionId: p.originalTransactionId) }
        try await audit(
            "extendSubscription", accountId: owner?.accountId, transactionId: p.originalTransactionId,
            reason: "+\(p.days) days (code \(p.reasonCode)): \(p.reason)", token: p.adminToken)
        return .init(originalTransactionId: p.originalTransactionId, expiresAtMs: expires, accountId: owner?.accountId)
    }

    static func checkReason(_ reason: String, maxBytes: Int) throws(RPCError) {
        guard !reason.isEmpty, reason.utf8.count <= maxBytes else {
            throw RPCError.invalidParams("reason must be 1-\(maxBytes) bytes", field: "reason", reason: "invalidValue")
        }
    }

    private func internalTokenForApple(_ what: String) throws(RPCError) -> String {
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
        return try await reconcile(notificationHistory: p.notificationHistory ?? true, subscriptionStatuses: p.subscriptionStatuses ?? true)
    }

    /// Reconciles with Apple (Notification History, then the subscription status sweep) in a task of its own, one
    /// at a time: a call made while a run is under way joins it and gets its result. The run is never cancelled with
    /// its caller (an admin's CLI that gives up after 30 s, the server's request deadline), so a long history is read
    /// to its end and the notification being taken in is never cut off half-way.
    public func reconcile(notificationHistory: Bool = true, subscriptionStatuses: Bool = true) async throws(RPCError)
        -> FulfillmentReconcile.Result
    {
        let run = reconciliation.withLockedValue { current -> Task<FulfillmentReconcile.Result, any Error> in
            if let current { return current.run }
            let id = reconciliations.withLockedValue { n -> Int in
                n += 1
                return n
            }
            let run = Task.detached { [self] () async throws -> FulfillmentReconcile.Result in
                defer { reconciliation.withLockedValue { if $0?.id == id { $0 = nil } } }
                return try await reconcileNow(notificationHistory: notificationHistory, subscriptionStatuses: subscriptionStatuses)
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

    private func reconcileNow(notificationHistory: Bool, subscriptionStatuses: Bool) async throws(RPCError) -> FulfillmentReconcile.Result {
        let token = try internalTokenForApple("reconciling with Apple")
        var result = FulfillmentReconcile.Result(notificationsSeen: 0, notificationsTakenIn: 0, subscriptionsChecked: 0, subscriptionsUpdated: 0)
        if notificationHistory {
            for environment in [AppleEnvironment.production, .sandbox] {
                let now = clock.nowMs
                let checkpoint = try await storeCall { try await self.store.reconcileCheckpoint(environment: environment.rawValue) }
                let start = max(0, (checkpoint ?? now - configuration.reconcileFirstWindowMs) - configuration.reconcileOverlapMs)
                var page: String?
                repeat {
                    // An end in the future is read as Apple's now: a clock here behind Apple's misses nothing.
                    let answer = try await dependencies.notificationHistory(
                        .init(
                            internalToken: token, environment: environment, startDateMs: start, endDateMs: now + 366 * 86_400_000,
                            paginationToken: page))
                    for record in answer.notifications {
                        result.notificationsSeen += 1
                        if let uuid = record.notificationUUID, try await storeCall({ try await self.store.notification(uuid) }) != nil { continue }
                        if try await receiveNotification(.init(signedPayload: record.signedPayload, internalToken: token)).firstDelivery {
                            result.notificationsTakenIn += 1
                        }
                    }
                    page = answer.hasMore ? answer.paginationToken : nil
                } while page != nil
                try await storeCall { try await self.store.saveReconcileCheckpoint(environment: environment.rawValue, signedDateMs: now) }
            }
        }
        if subscriptionStatuses {
            let now = clock.nowMs
            let originals = try await storeCall {
                try await self.store.subscriptionsToCheck(nowMs: now, limit: self.configuration.reconcileSubscriptionsPerRun)
            }
            for original in originals {
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
                    changed = try await storeCall { try await self.store.recordRenewal(state) } || changed
                }
                if let purchase = VerifiedPurchase.fromSignedTransaction(
                    status.transaction, environment: status.transaction["environment"]?.stringValue)
                {
                    if purchase.cancellationDateMs != nil {
                        let outcome = try await storeCall {
                            try await self.store.revoke(transactionId: purchase.transactionId, reason: "refunded", nowMs: now)
                        }
                        changed = outcome == .revoked || changed
                    } else {
                        changed = try await applyFromApple(purchase, nowMs: now).contains(.granted) || changed
                    }
                }
                if changed { result.subscriptionsUpdated += 1 }
            }
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
        return .init(entries: try await storeCall { try await self.store.audit(limit: limit) })
    }

    /// Writes an admin action to the audit log, naming the credential by a digest of it, never the token.
    private func audit(_ action: String, accountId: String? = nil, transactionId: String?, reason: String, token: String) async throws(RPCError) {
        let credential = SHA256.hash(data: Array(token.utf8)).prefix(6).map { String(format: "%02x", $0) }.joined()
        let now = clock.nowMs
        try await storeCall {
            try await self.store.recordAudit(
                action: action, accountId: accountId, transactionId: transactionId, reason: reason, credential: credential, nowMs: now)
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
