import IAPProtocol

/// A storage engine of fulfillment: it opens transactions and keeps its schema, nothing more. Everything above it
/// (what to read and write, in which transaction, with which rules) is written once, in the extensions below and in
/// `FulfillmentRecords`, over the engine's `SQLSession`.
public protocol FulfillmentDatabase: Sendable {
    /// Runs `body` over committed data.
    func read<T: Sendable>(_ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T
    /// Runs `body` in one write transaction: all of it commits, or none. `locking` names what two writers must not
    /// change at once (PostgreSQL takes an advisory lock per key; SQLite has one writer anyway).
    func write<T: Sendable>(locking keys: [String], _ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T
    /// `write(locking:)` for a body that reads once, then only writes, and reads the last event sequence of the account
    /// it appends events for in that read (the spend): PostgreSQL runs it as those two statements when it can
    /// (`PostgresFulfillmentStore.writeAfterOneRead`); SQLite as any write.
    func writeAfterOneRead<T: Sendable>(locking keys: [String], _ body: @escaping @Sendable (any SQLSession) throws -> T)
        async throws -> T
    /// Whether `writeAfterOneRead` saves round trips (PostgreSQL): only then is a body worth shaping into one wider read
    /// (SQLite reads in-process, where the wider read would only cost).
    var writesAloneAfterOneRead: Bool { get }
    /// `writeAfterOneRead` for a change of `holder`'s coins that may be decided on what this instance last knew of its
    /// wallet instead of a read (PostgreSQL: `PostgresFulfillmentStore.writeOnKnownWallet`). `wrote`: whether an answer
    /// is one the body wrote for (only such an answer may rest on what was known; any other is read again).
    func writeOnKnownWallet<T: Sendable>(
        _ holder: Holder, locking keys: [String], wrote: @escaping @Sendable (T) -> Bool,
        _ body: @escaping @Sendable (any SQLSession) throws -> T
    ) async throws -> T
    /// One statement that claims rows other workers may be claiming at the same moment and skips the ones they hold
    /// (`FOR UPDATE SKIP LOCKED`): PostgreSQL runs it by itself at READ COMMITTED, where claimers pass each other by
    /// (SERIALIZABLE made two claims of one queue abort each other; measured 2026-11-30); SQLite as any write.
    func claimWrite<T: Sendable>(_ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T
}

/// A notification no longer pending or parked when its processing committed: nothing of it is kept.
struct SettledMeanwhile: Error {}

extension FulfillmentDatabase {
    func write<T: Sendable>(_ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T {
        try await write(locking: [], body)
    }

    static func accountLock(_ accountId: String) -> [String] { ["fulfillment:account:" + accountId] }

    public func writeAfterOneRead<T: Sendable>(locking keys: [String], _ body: @escaping @Sendable (any SQLSession) throws -> T)
        async throws -> T
    {
        try await write(locking: keys, body)
    }

    public var writesAloneAfterOneRead: Bool { false }

    public func claimWrite<T: Sendable>(_ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T {
        try await write(locking: [], body)
    }

    public func writeOnKnownWallet<T: Sendable>(
        _ holder: Holder, locking keys: [String], wrote: @escaping @Sendable (T) -> Bool,
        _ body: @escaping @Sendable (any SQLSession) throws -> T
    ) async throws -> T {
        try await writeAfterOneRead(locking: keys, body)
    }
}

// MARK: writes: the grant rules, each in one transaction

extension FulfillmentStorage where Self: FulfillmentDatabase {
    /// Records and grants every purchase in ONE write transaction (`GrantRules.apply`); the answer is what was
    /// committed, with the balance and entitlements of `answerScope`.
    public func apply(
        _ planned: [PlannedPurchase], accountId: String, appAccountToken: String?, owed: AppleFollowUps, mode: FulfillmentMode,
        policy: OwnershipPolicy, answerScope: AccountScope = .production, nowMs: Int64
    ) async throws -> AppliedPurchases {
        // One coin purchase (most redeems) reads once (what is stored of it, the wallets, the account's last event and the
        // answer's entitlements: `FulfillmentRecords(answering:)`), then only writes: on PostgreSQL two statements. A
        // refunded one, which reads again to revoke, runs in a transaction after all (`writeAfterOneRead`).
        if writesAloneAfterOneRead, planned.count == 1, case .coins? = planned[0].rule {
            let answer = Holder(accountId: accountId, scope: answerScope)
            return try await writeAfterOneRead(locking: Self.accountLock(accountId)) { s in
                try GrantRules.apply(
                    planned, accountId: accountId, appAccountToken: appAccountToken, owed: owed, mode: mode, policy: policy,
                    answerScope: answerScope, nowMs: nowMs, in: FulfillmentRecords(s, answering: answer, atMs: nowMs))
            }
        }
        return try await write(locking: Self.accountLock(accountId)) { s in
            try GrantRules.apply(
                planned, accountId: accountId, appAccountToken: appAccountToken, owed: owed, mode: mode, policy: policy,
                answerScope: answerScope, nowMs: nowMs, in: FulfillmentRecords(s))
        }
    }

    /// Revokes one processed transaction, whatever environment it was recorded under (`GrantRules.revoke`).
    public func revoke(transactionId: String, reason: String, nowMs: Int64) async throws -> RevokeOutcome {
        try await write { s in
            let tx = FulfillmentRecords(s)
            guard try tx.processed(transactionId) != nil else { return .notFound }
            return try GrantRules.revoke(transactionId, reason: reason, nowMs: nowMs, in: tx) ? .revoked : .alreadyRevoked
        }
    }

    public func reinstate(transactionId: String, nowMs: Int64) async throws -> Bool {
        try await write { s in try GrantRules.reinstate(transactionId, nowMs: nowMs, in: FulfillmentRecords(s)) }
    }

    public func recordEarlyRevocation(transactionId: String, reason: String, refundShareMilli: Int64?, nowMs: Int64) async throws {
        try await write { s in
            try FulfillmentRecords(s).rememberEarlyRevocation(transactionId, reason: reason, refundShareMilli: refundShareMilli, nowMs: nowMs)
        }
    }

    public func recordRenewal(_ state: RenewalState, nowMs: Int64) async throws -> Bool {
        try await write { s in try FulfillmentRecords(s).keepRenewal(state, nowMs: nowMs) }
    }

    /// One notification in ONE transaction: what is stored about its purchase is read, `NotificationRules` decides,
    /// its effects are applied and its inbox row records the outcome (applied or ignored, with the reason).
    public func applyNotification(_ facts: NotificationRules.Facts, uuid: String, attempts: Int, owed: AppleFollowUps, nowMs: Int64)
        async throws
        -> NotificationRules.Decision
    {
        do {
            return try await write { s in
                let tx = FulfillmentRecords(s)
                let decision = NotificationRules.decide(facts, stored: try tx.stored(for: facts))
                for effect in decision.effects { try tx.apply(effect, owed: owed, nowMs: nowMs) }
                if let signed = decision.standsSignedMs, let p = facts.purchase { try tx.recordStandsSigned(p.transactionId, signedMs: signed) }
                if let signed = decision.refundSignedMs, let p = facts.purchase { try tx.recordRefundSigned(p.transactionId, signedMs: signed) }
                // The row's own update says whether it was still pending or parked: settled meanwhile (an operator
                // dismissed it while this retry ran), the whole transaction, effects included, rolls back.
                let settled = try InboxRecords(s).settle(
                    uuid, state: decision.applied ? .applied : .ignored, attempts: attempts, nextAttemptAtMs: nowMs,
                    lastError: decision.ignoredBecause, nowMs: nowMs)
                guard settled == 1 else { throw SettledMeanwhile() }
                return decision
            }
        } catch is SettledMeanwhile {
            return NotificationRules.Decision(effects: [], ignoredBecause: "settled meanwhile")
        }
    }

    public func extendEntitlement(originalTransactionId: String, expiresAtMs: Int64, nowMs: Int64) async throws -> Bool {
        try await write { s in
            try GrantRules.extendRenewal(original: originalTransactionId, expiresAtMs: expiresAtMs, nowMs: nowMs, in: FulfillmentRecords(s))
        }
    }

    /// Spends once per (account, scope, idempotency key) (`GrantRules.spend`).
    public func spend(
        accountId: String, scope: AccountScope = .production, amount: Int64, idempotencyKey: String, memo: String?, nowMs: Int64
    ) async throws -> SpendOutcome {
        let holder = Holder(accountId: accountId, scope: scope)
        let spent: @Sendable (SpendOutcome) -> Bool = { if case .spent = $0 { true } else { false } }
        return try await writeOnKnownWallet(holder, locking: Self.accountLock(accountId), wrote: spent) { s in
            try GrantRules.spend(holder, amount: amount, idempotencyKey: idempotencyKey, memo: memo, nowMs: nowMs, in: FulfillmentRecords(s))
        }
    }

    public func recordContentDelivery(accountId: String, scope: AccountScope, contentId: String, nowMs: Int64) async throws {
        try await write { s in
            try FulfillmentQueries(s).recordContentDelivery(Holder(accountId: accountId, scope: scope), contentId: contentId, nowMs: nowMs)
        }
    }

    public func saveReconcileCheckpoint(environment: String, signedDateMs: Int64) async throws {
        try await write { s in try FulfillmentQueries(s).saveReconcileCheckpoint(environment, signedDateMs: signedDateMs) }
    }

    public func recordAudit(
        action: String, accountId: String?, transactionId: String?, reason: String, credential: String, operatorName: String?, nowMs: Int64
    ) async throws {
        try await write { s in
            try FulfillmentQueries(s).recordAudit(
                action, accountId: accountId, transactionId: transactionId, reason: reason, credential: credential, operatorName: operatorName,
                nowMs: nowMs)
        }
    }
}
