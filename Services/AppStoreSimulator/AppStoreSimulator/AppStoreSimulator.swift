import Crypto
import Foundation
import GRDB
import IAPProtocol
import JSONRPC
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RPCTransport
import Receipts
import ServiceSupport
import X509

/// A local stand-in for the App Store (development and tests only): simulated Apple IDs buy, finish,
/// restore and get refunds; subscriptions renew as the simulated clock advances; every answer carries
/// the app receipt and StoreKit 2 signed transactions made with the simulator's own Apple-shaped PKI.
///
/// The rules it follows are the purchase lifecycle rules of docs/receipts.md: consumables stay in the receipt only until finished;
/// re-buying an owned non-consumable is a new regular transaction with the same original id; restores
/// and renewals get new transaction ids and keep the original id; a refund sets a cancellation date.
public final class AppStoreSimulator: Sendable {
    let store: SimulatorStore
    let pki: SimulatorPKI
    /// The App Store Server API key its `/inApps` endpoints accept (`sim.apiKey`).
    public let apiKey: SimulatorAPIKey
    /// The subscription-offer key purchases with a promotional offer must be signed with (`sim.offerKey`).
    public let offerKey: SimulatorAPIKey
    private let clock: ServiceClock
    /// Sends notifications to the URLs `sim.setNotificationURL` configured.
    public let courier: NotificationCourier
    private let negativePKIs = NIOLockedValueBox<[SimSigning: ReceiptSigningPKI]>([:])
    /// Answers OCSP about the simulator's certificates (`POST /ocsp`; `sim.revokeCertificate`).
    public let ocsp: SimulatorOCSPResponder
    public static let defaultPeriodDays = 30
    /// How long the simulated App Store waits for a realtime retention answer before it shows the default message.
    let realtimeDeadline: TimeAmount
    /// The performance test's response time threshold (Apple's is about 700 ms).
    let performanceThresholdMs: Int

    /// `ocspURL`: the responder a new data directory's certificates name (the simulator's own `/ocsp`, as the
    /// verifiers reach it); an existing directory keeps the certificates it has.
    public init(
        directory: URL, clock: ServiceClock = .system, delivery: NotificationCourier.Configuration = .init(), ocspURL: String? = nil,
        realtimeDeadline: TimeAmount = AppStoreSimulator.defaultRealtimeDeadline, performanceThresholdMs: Int = 700
    ) throws {
        self.realtimeDeadline = realtimeDeadline
        self.performanceThresholdMs = performanceThresholdMs
        let store = try SimulatorStore(directory: directory)
        self.store = store
        self.pki = try SimulatorPKI.loadOrCreate(directory: directory, ocspURL: ocspURL)
        self.ocsp = SimulatorOCSPResponder(pki: pki, directory: directory) { Date(timeIntervalSince1970: Double(clock.nowMs) / 1000) }
        self.apiKey = try SimulatorAPIKey.loadOrCreate(directory: directory)
        self.offerKey = try SimulatorAPIKey.loadOrCreate(directory: directory, name: "offer-key")
        self.clock = clock
        self.courier = try NotificationCourier(store: store, configuration: delivery) { db in
            clock.nowMs + (try Int64.fetchOne(db, sql: "SELECT clockOffsetMs FROM simState")!)
        }
    }

    /// Simulated now: the wall clock plus every `advanceClock` so far.
    func now(_ db: Database) throws -> Int64 {
        clock.nowMs + (try Int64.fetchOne(db, sql: "SELECT clockOffsetMs FROM simState")!)
    }

    /// The simulator's now, read on its own (not inside a database transaction).
    func nowMs() throws -> Int64 { try store.writer.read { try now($0) } }

    /// The root of the receipt-signing chain (what the HTTP endpoint trusts).
    public var receiptRoot: Certificate { pki.receipts.root }

    public func trustAnchor() throws -> SimTrustAnchor.Result {
        .init(
            receiptRoot: Data(try SimulatorPKI.der(pki.receipts.root)).base64EncodedString(),
            jwsRoot: Data(try SimulatorPKI.der(pki.signedPayloads.root)).base64EncodedString())
    }

    // MARK: purchases

    public func purchase(_ p: SimPurchase.Params) throws -> SimPurchase.Result {
        guard !p.appleId.isEmpty, !p.bundleId.isEmpty, !p.productId.isEmpty else {
            throw RPCError.invalidParams("appleId, bundleId and productId must not be empty", reason: "emptyField")
        }
        let quantity = p.quantity ?? 1
        guard (1...10).contains(quantity), p.productType == .consumable || quantity == 1 else {
            throw RPCError.invalidParams(
                "quantity must be 1-10 (and 1 for anything but consumables)", field: "quantity",
                reason: "invalidQuantity")
        }
        if let token = p.appAccountToken, UUID(uuidString: token) == nil {
            throw RPCError.invalidParams("appAccountToken must be a UUID", field: "appAccountToken", reason: "invalidValue")
        }
        guard (p.price == nil) == (p.currency == nil), (0...1_000_000_000_000).contains(p.price ?? 0),
            p.currency.map({ $0.count == 3 && $0.allSatisfy { $0.isASCII && $0.isUppercase } }) ?? true
        else {
            throw RPCError.invalidParams(
                "price (milliunits, 0 to 10^12) and currency (ISO 4217, e.g. USD) go together", field: "price", reason: "invalidValue")
        }
        let period = p.subscriptionPeriodDays ?? Self.defaultPeriodDays
        guard (1...366).contains(period) else {
            throw RPCError.invalidParams("subscriptionPeriodDays must be 1-366", field: "subscriptionPeriodDays", reason: "invalidValue")
        }
        let environment = p.environment ?? .production
        if p.offer != nil || p.offerJWS != nil {
            guard p.productType == .autoRenewable, (p.offer == nil) != (p.offerJWS == nil) else {
                throw RPCError.invalidParams(
                    "one promotional offer (offer or offerJWS), and only for auto-renewable subscriptions", field: "offer",
                    reason: "invalidValue")
            }
        }
        let (transaction, receipt) = try write { db -> (SimTransaction, Receipt) in
            let now = try self.now(db)
            let offerIdentifier = try self.redeemOffer(p, nowMs: now, db: db)
            if let device = p.deviceIdentifier {
                try db.execute(
                    sql: "INSERT OR REPLACE INTO simDevice (appleId, bundleId, deviceIdentifier) VALUES (?, ?, ?)",
                    arguments: [p.appleId, p.bundleId, device])
            }
            let id = try SimulatorStore.nextTransactionId(db)
            let app = try SimulatorStore.appTransactionMade(
                appleId: p.appleId, bundleId: p.bundleId, environment: environment, nowMs: now, db: db)
            let history = try SimulatorStore.transactions(appleId: p.appleId, bundleId: p.bundleId, environment: environment, db: db)
            // Buying an owned non-consumable again: a new regular transaction for the same original, no charge.
            let owned =
                p.productType == .nonConsumable
                ? history.first {
                    $0.productId == p.productId && $0.cancellationDateMs == nil && $0.transactionId == $0.originalTransactionId
                        && $0.sharedFrom == nil  // a family member buying what is shared with them buys their own
                }
                : nil
            let t = SimTransaction(
                transactionId: id, appleId: p.appleId, bundleId: p.bundleId, productId: p.productId, productType: p.productType,
                quantity: quantity, originalTransactionId: owned?.originalTransactionId ?? id, purchaseDateMs: now,
                originalPurchaseDateMs: owned?.originalPurchaseDateMs ?? now,
                expiresDateMs: p.productType == .autoRenewable ? now + Int64(period) * 86_400_000 : nil,
                cancellationDateMs: nil, finished: false, reason: "PURCHASE",
                webOrderLineItemId: p.productType == .autoRenewable ? Int64(id)! : 0, appAccountToken: p.appAccountToken,
                periodDays: p.productType == .autoRenewable ? period : nil, environment: environment,
                orderId: SimulatorStore.newOrderId(), offerIdentifier: offerIdentifier, appTransactionId: app.appTransactionId,
                price: p.price, currency: p.currency)
            try SimulatorStore.insert(t, db: db)
            if p.productType == .autoRenewable {
                let resubscribe = history.contains { $0.productType == .autoRenewable }
                try self.recordNotification("SUBSCRIBED", subtype: resubscribe ? "RESUBSCRIBE" : "INITIAL_BUY", t, signedDate: now, db: db)
            } else if owned == nil {
                try self.recordNotification("ONE_TIME_CHARGE", t, signedDate: now, db: db)
            }
            return (t, try self.receipt(appleId: p.appleId, bundleId: p.bundleId, environment: p.receipt?.environment ?? environment, db: db))
        }
        courier.kick()
        return .init(
            transactionId: transaction.transactionId, originalTransactionId: transaction.originalTransactionId,
            receiptData: try sign(receipt, p.receipt), signedTransaction: try signedTransaction(transaction, signedAt: transaction.purchaseDateMs),
            environment: environment.appleName, orderId: transaction.orderId)
    }

    public func finish(_ p: SimFinishTransaction.Params) throws {
        try write { db in
            guard let t = try SimulatorStore.transaction(p.transactionId, db: db), t.appleId == p.appleId else {
                throw RPCError.notFound("no transaction \(p.transactionId) for this Apple ID", reason: "unknownTransaction")
            }
            try db.execute(sql: "UPDATE simTransaction SET finished = 1 WHERE transactionId = ?", arguments: [t.transactionId])
        }
    }

    /// New restored transactions for every owned non-consumable and subscription (consumables and
    /// non-renewing subscriptions are not restored by the system).
    public func restore(_ p: SimRestore.Params) throws -> SimRestore.Result {
        let environment = p.receipt?.environment ?? .production
        let (restored, receipt) = try write { db -> ([SimTransaction], Receipt) in
            let now = try self.now(db)
            let history = try SimulatorStore.transactions(appleId: p.appleId, bundleId: p.bundleId, environment: environment, db: db)
            var latestByOriginal: [String: SimTransaction] = [:]
            for t in history where t.productType == .nonConsumable || t.productType == .autoRenewable {
                latestByOriginal[t.originalTransactionId] = t
            }
            var restored: [SimTransaction] = []
            for original in latestByOriginal.values.sorted(by: { $0.originalTransactionId < $1.originalTransactionId })
            where original.cancellationDateMs == nil {
                var t = original
                t.transactionId = try SimulatorStore.nextTransactionId(db)
                t.purchaseDateMs = now
                t.reason = "RESTORE"
                t.finished = false
                t.orderId = nil
                try SimulatorStore.insert(t, db: db)
                restored.append(t)
            }
            return (restored, try self.receipt(appleId: p.appleId, bundleId: p.bundleId, environment: environment, db: db))
        }
        return .init(
            receiptData: try sign(receipt, p.receipt), signedTransactions: try restored.map { try signedTransaction($0, signedAt: $0.purchaseDateMs) }
        )
    }

    /// Sets the transaction's cancellation date; answers the REFUND notification the App Store would send.
    public func refund(_ p: SimRefund.Params) throws -> SimRefund.Result {
        let payload = try write { db -> String in
            guard var t = try SimulatorStore.transaction(p.transactionId, db: db), t.appleId == p.appleId else {
                throw RPCError.notFound("no transaction \(p.transactionId) for this Apple ID", reason: "unknownTransaction")
            }
            guard t.cancellationDateMs == nil else {
                throw RPCError.conflict("transaction \(p.transactionId) is already refunded", reason: "alreadyRefunded")
            }
            guard t.sharedFrom == nil else {
                throw RPCError.invalidParams(
                    "a family member's transaction is not refunded (they did not pay): refund the purchaser's", field: "transactionId",
                    reason: "notPurchaser")
            }
            if let share = p.revocationPercentage, !(1...99_999).contains(share) {
                throw RPCError.invalidParams(
                    "revocationPercentage is a share in milliunits, 1-99999 (none: the whole)", field: "revocationPercentage",
                    reason: "invalidValue")
            }
            t.cancellationDateMs = try self.now(db)
            t.revocationPercentage = p.revocationPercentage
            try db.execute(
                sql: "UPDATE simTransaction SET cancellationDateMs = ?, revocationPercentage = ? WHERE transactionId = ?",
                arguments: [t.cancellationDateMs, t.revocationPercentage, t.transactionId])
            let refund = try self.recordNotification("REFUND", t, signedDate: t.cancellationDateMs!, db: db)
            // The family members it was shared with lose it too (REVOKE, each about their own transaction).
            try self.revokeFamilyShares(of: t, nowMs: t.cancellationDateMs!, db: db)
            return refund
        }
        courier.kick()
        return .init(signedPayload: payload)
    }

    /// Moves the simulated clock; every subscription whose period passes renews (a new transaction
    /// with the same original id and the next expiry), unless it was refunded.
    public func advanceClock(_ p: SimAdvanceClock.Params) throws -> SimAdvanceClock.Result {
        guard p.seconds >= 0, p.seconds <= 10 * 366 * 86_400 else {
            throw RPCError.invalidParams("seconds must be 0 to ten years", field: "seconds", reason: "invalidValue")
        }
        // A mass extension requested before this moment is carried out at it, whichever runs first.
        try completeMassExtensions()
        let (now, renewed, notifications) = try write { db -> (Int64, [SimTransaction], [String]) in
            try db.execute(sql: "UPDATE simState SET clockOffsetMs = clockOffsetMs + ?", arguments: [p.seconds * 1000])
            let now = try self.now(db)
            var latest: [String: SimTransaction] = [:]
            for t in try SimulatorStore.allAutoRenewables(db) where t.reason != "RESTORE" {
                // The period bought last: an upgrade to a shorter plan ends before the period it replaced.
                if let current = latest[t.originalTransactionId], current.seq >= t.seq { continue }
                latest[t.originalTransactionId] = t
            }
            var renewed: [SimTransaction] = []
            var notifications: [String] = []
            for var t in latest.values.sorted(by: { $0.originalTransactionId < $1.originalTransactionId }) where t.cancellationDateMs == nil {
                var renewal = try SimulatorStore.renewal(t.originalTransactionId, db: db)
                // A price increase not consented to, a product off sale, another reason: the period ends, once,
                // with EXPIRED and the reason's subtype, whatever auto-renew says.
                if let intent = renewal.endsAtPeriodEnd, renewal.autoRenew, !renewal.billingRetry {
                    if let expires = t.expiresDateMs, expires <= now, renewal.expiredAtMs == nil {
                        renewal.expiredAtMs = expires
                        renewal.expirationIntent = intent
                        renewal.autoRenew = false
                        try SimulatorStore.saveRenewal(t.originalTransactionId, renewal, db: db)
                        let subtype = [3: "PRICE_INCREASE", 4: "PRODUCT_NOT_FOR_SALE"][intent]
                        notifications.append(try self.recordNotification("EXPIRED", subtype: subtype, t, signedDate: expires, db: db))
                    }
                    continue
                }
                // Auto-renew off: the period ends, once, with EXPIRED (VOLUNTARY).
                if !renewal.autoRenew {
                    if let expires = t.expiresDateMs, expires <= now, renewal.expiredAtMs == nil {
                        try SimulatorStore.setExpired(t.originalTransactionId, atMs: expires, db: db)
                        notifications.append(try self.recordNotification("EXPIRED", subtype: "VOLUNTARY", t, signedDate: expires, db: db))
                    }
                    continue
                }
                if try self.advanceBilling(t, now: now, notifications: &notifications, db: db) { continue }
                while let expires = t.expiresDateMs, expires <= now {
                    // The charge of this renewal fails: billing retry (and grace) from here.
                    if try self.advanceBilling(t, now: now, notifications: &notifications, db: db) { break }
                    t = try self.renew(t, startingAt: expires, db: db)
                    renewed.append(t)
                    notifications.append(try self.recordNotification("DID_RENEW", t, signedDate: t.purchaseDateMs, db: db))
                }
            }
            return (now, renewed, notifications)
        }
        // Renewals' notifications and retries that fell due as the clock moved.
        courier.kick()
        return .init(nowMs: now, renewals: renewed.count, notifications: notifications)
    }

    /// The next period of a subscription from `start`: a new RENEWAL transaction (new id and order id, the
    /// same original), recorded.
    /// A pending downgrade takes effect here (the new period is of the lower plan), and an accepted price
    /// increase is now the price.
    /// `reason` PURCHASE: a plan upgrade's first period (it starts now).
    func renew(_ t: SimTransaction, startingAt start: Int64, reason: String = "RENEWAL", db: Database) throws -> SimTransaction {
        var next = t
        var renewal = try SimulatorStore.renewal(t.originalTransactionId, db: db)
        if renewal.autoRenewProductId != nil || renewal.priceIncreaseStatus == 1 {
            next.productId = renewal.autoRenewProductId ?? t.productId
            renewal.autoRenewProductId = nil
            renewal.priceIncreaseStatus = nil
            try SimulatorStore.saveRenewal(t.originalTransactionId, renewal, db: db)
        }
        next.transactionId = try SimulatorStore.nextTransactionId(db)
        next.purchaseDateMs = start
        next.expiresDateMs = start + Int64(t.periodDays ?? Self.defaultPeriodDays) * 86_400_000
        next.webOrderLineItemId += 1
        next.reason = reason
        next.finished = false
        next.orderId = SimulatorStore.newOrderId()
        next.offerIdentifier = nil  // an offer is for the period it was redeemed in
        try SimulatorStore.insert(next, db: db)
        return next
    }

    /// An App Store Server Notification v2 about one transaction (with the subscription's renewal info),
    /// signed with the JWS chain and recorded for delivery and Get Notification History.
    @discardableResult
    func recordNotification(_ type: String, subtype: String? = nil, _ t: SimTransaction, signedDate: Int64, db: Database) throws -> String {
        var data: [String: Any] = [
            "bundleId": t.bundleId, "environment": t.environment.appleName, "signedTransactionInfo": try signedTransaction(t, signedAt: signedDate),
        ]
        if t.environment == .production { data["appAppleId"] = 1_234_567_890 }
        if t.productType == .autoRenewable {
            data["signedRenewalInfo"] = try signedRenewalInfo(t, db: db)
            data["status"] = try subscriptionStatus(t, db: db)
        }
        return try recordNotification(
            type, subtype: subtype, bundleId: t.bundleId, environment: t.environment, data: data, transaction: t, signedDate: signedDate, db: db
        ).signedPayload
    }

    /// Signs and records any notification (`data` as Apple's `data` object, or under `section`: `summary` for a
    /// mass extension's summary, `externalPurchaseToken`).
    func recordNotification(
        _ type: String, subtype: String?, bundleId: String, environment: SimEnvironment, section: String = "data", data: [String: Any],
        transaction t: SimTransaction?, signedDate: Int64, db: Database
    ) throws -> (notificationUUID: String, signedPayload: String) {
        let uuid = UUID().uuidString.lowercased()
        var notification: [String: Any] = [
            "notificationType": type, "notificationUUID": uuid, "version": "2.0", "signedDate": signedDate, section: data,
        ]
        if let subtype { notification["subtype"] = subtype }
        let payload = try pki.signedPayloads.sign(
            payload: Array(try JSONSerialization.data(withJSONObject: notification, options: [.sortedKeys])))
        try SimulatorStore.insertNotification(
            SimNotification(
                notificationUUID: uuid, seq: 0, bundleId: bundleId, environment: environment, notificationType: type, subtype: subtype,
                transactionId: t?.transactionId, originalTransactionId: t?.originalTransactionId, signedDateMs: signedDate,
                signedPayload: payload, attempts: 0, nextAttemptAtMs: nil), db: db)
        return (uuid, payload)
    }

    public func currentReceipt(_ p: SimReceipt.Params) throws -> SimReceipt.Result {
        let receipt = try write { db in
            try self.receipt(appleId: p.appleId, bundleId: p.bundleId, environment: p.receipt?.environment ?? .production, db: db)
        }
        return .init(receiptData: try sign(receipt, p.receipt))
    }

    // MARK: receipts and signed transactions

    /// The app receipt now: every transaction of this Apple ID for the bundle in one environment, except
    /// finished consumables.
    private func receipt(appleId: String, bundleId: String, environment: SimEnvironment, db: Database) throws -> Receipt {
        let now = try self.now(db)
        var r = Receipt()
        r.receiptType = environment.receiptType
        r.appItemId = 0
        r.bundleId = bundleId
        r.bundleIdDER = [0x0C, UInt8(bundleId.utf8.count)] + Array(bundleId.utf8)
        r.applicationVersion = "1"
        r.originalApplicationVersion = "1.0"
        var opaque = [UInt8](repeating: 0, count: 16)
        var rng = SystemRandomNumberGenerator()
        for i in opaque.indices { opaque[i] = rng.next() }
        r.opaqueValue = opaque
        let device = try String.fetchOne(
            db, sql: "SELECT deviceIdentifier FROM simDevice WHERE appleId = ? AND bundleId = ?",
            arguments: [appleId, bundleId])
        let deviceBytes = device.flatMap(ReceiptVerifier.deviceBytes) ?? [UInt8](repeating: 0, count: 16)
        r.sha1Hash = Array(Insecure.SHA1.hash(data: deviceBytes + opaque + r.bundleIdDER))
        r.creationDateMs = now
        let transactions = try SimulatorStore.transactions(appleId: appleId, bundleId: bundleId, environment: environment, db: db)
        r.originalPurchaseDateMs = transactions.first?.purchaseDateMs ?? now
        r.inApp = transactions.filter { !($0.productType == .consumable && $0.finished) }.map { t in
            var p = InAppPurchaseReceipt()
            p.quantity = Int64(t.quantity)
            p.productId = t.productId
            p.transactionId = t.transactionId
            p.originalTransactionId = t.originalTransactionId
            p.purchaseDateMs = t.purchaseDateMs
            p.originalPurchaseDateMs = t.originalPurchaseDateMs
            p.productType = [.nonConsumable: 0, .consumable: 1, .nonRenewing: 2, .autoRenewable: 3][t.productType]
            p.expiresDateMs = t.expiresDateMs
            p.cancellationDateMs = t.cancellationDateMs
            p.webOrderLineItemId = t.webOrderLineItemId
            p.isTrialPeriod = false
            p.isInIntroOfferPeriod = false
            return p
        }
        return r
    }

    private func sign(_ receipt: Receipt, _ options: SimReceiptOptions?) throws -> String {
        let digest: ReceiptBuilder.Digest = options?.digest == .sha1 ? .sha1 : .sha256
        let signer: ReceiptSigningPKI
        switch options?.signing ?? .valid {
        case .valid: signer = pki.receipts
        case .expiredChain:
            signer = try negative(.expiredChain) {
                try self.pki.receipts.withLeaf(
                    notBefore: Date(timeIntervalSince1970: 1_577_836_800),
                    notAfter: Date(timeIntervalSince1970: 1_609_459_200))  // 2020
            }
        case .untrustedChain:
            signer = try negative(.untrustedChain) {
                try ReceiptSigningPKI.generate(
                    {
                        var o = ReceiptSigningPKI.Options(); o.name = "Untrusted"; return o
                    }())
            }
        }
        return Data(try signer.sign(receipt, digest: digest)).base64EncodedString()
    }

    private func negative(_ kind: SimSigning, _ make: () throws -> ReceiptSigningPKI) throws -> ReceiptSigningPKI {
        if let existing = negativePKIs.withLockedValue({ $0[kind] }) { return existing }
        let made = try make()
        negativePKIs.withLockedValue { $0[kind] = made }
        return made
    }

    /// The StoreKit 2 JWS of a transaction, with Apple's field names, signed at `signedAt` (the simulator's now: Apple's
    /// `signedDate` is when it signed, which tells a newer copy from an older one; until 2026-11-30 it was the refund's or
    /// the purchase's time, so a copy made after a refund's reversal looked older than the refund's).
    func signedTransaction(_ t: SimTransaction, signedAt: Int64) throws -> String {
        var payload: [String: Any] = [
            "transactionId": t.transactionId, "originalTransactionId": t.originalTransactionId, "bundleId": t.bundleId,
            "productId": t.productId, "purchaseDate": t.purchaseDateMs, "originalPurchaseDate": t.originalPurchaseDateMs,
            "quantity": t.quantity, "type": Self.appleType(t.productType),
            "inAppOwnershipType": t.sharedFrom == nil ? "PURCHASED" : "FAMILY_SHARED",
            "signedDate": signedAt, "environment": t.environment.appleName,
            "transactionReason":
                t.reason == "RENEWAL" ? "RENEWAL" : "PURCHASE", "storefront": "USA", "storefrontId": "143441",
            "webOrderLineItemId": String(t.webOrderLineItemId),
        ]
        if let e = t.expiresDateMs { payload["expiresDate"] = e }
        if let c = t.cancellationDateMs {
            payload["revocationDate"] = c
            payload["revocationReason"] = 0
            if t.sharedFrom != nil {
                payload["revocationType"] = "FAMILY_REVOKE"
            } else {
                payload["revocationType"] = t.revocationPercentage == nil ? "REFUND_FULL" : "REFUND_PRORATED"
                payload["revocationPercentage"] = t.revocationPercentage ?? 100_000
            }
        }
        if let token = t.appAccountToken { payload["appAccountToken"] = token.lowercased() }
        if t.isUpgraded { payload["isUpgraded"] = true }
        if let price = t.price, let currency = t.currency {
            payload["price"] = price
            payload["currency"] = currency
        }
        if let app = t.appTransactionId { payload["appTransactionId"] = app }
        if t.productType == .autoRenewable { payload["subscriptionGroupIdentifier"] = "sim-group" }
        if let offer = t.offerIdentifier {
            payload["offerType"] = 2  // promotional
            payload["offerIdentifier"] = offer
        }
        return try pki.signedPayloads.sign(payload: Array(try JSONSerialization.data(withJSONObject: payload, options: [.sortedKeys])))
    }

    static func appleType(_ type: ProductType) -> String {
        switch type {
        case .consumable: return "Consumable"
        case .nonConsumable: return "Non-Consumable"
        case .autoRenewable: return "Auto-Renewable Subscription"
        case .nonRenewing: return "Non-Renewing Subscription"
        }
    }

    /// `sim.apiKey`: the key as App Store Connect would hand it over.
    public func apiKeyResult() -> SimAPIKey.Result {
        .init(keyId: apiKey.keyId, issuerId: apiKey.issuerId, privateKey: apiKey.privateKey.pemRepresentation)
    }

    func write<T>(_ body: (Database) throws -> T) throws -> T {
        do {
            return try store.writer.write(body)
        } catch let error as RPCError {
            throw error
        }
    }

    /// The `sim.*` methods. They block on SQLite and on RSA signing: run on the blocking pool.
    /// `endpoint` adds `sim.setFault` for the HTTP verifyReceipt endpoints.
    public func router(endpoint: VerifyReceiptEndpoint? = nil) -> RPCRouter {
        var r = RPCRouter()
        if let endpoint {
            r.registerImmediate(SimSetFault.self) { p, _ in
                try endpoint.setFault(p)
                return EmptyResult()
            }
        }
        r.registerBlocking(SimTrustAnchor.self) { _, _ in try self.trustAnchor() }
        r.registerBlocking(SimRevokeCertificate.self) { p, _ in
            .init(serialNumber: try self.ocsp.revoke(p.certificate, nowMs: self.clock.nowMs), ocspURL: self.pki.ocspURL)
        }
        r.registerImmediate(SimAPIKey.self) { _, _ in self.apiKeyResult() }
        r.registerImmediate(SimOfferKey.self) { _, _ in
            .init(keyId: self.offerKey.keyId, issuerId: self.offerKey.issuerId, privateKey: self.offerKey.privateKey.pemRepresentation)
        }
        r.registerBlocking(SimPurchase.self) { p, _ in try self.purchase(p) }
        r.registerBlocking(SimFinishTransaction.self) { p, _ in
            try self.finish(p)
            return EmptyResult()
        }
        r.registerBlocking(SimRestore.self) { p, _ in try self.restore(p) }
        r.registerBlocking(SimRefund.self) { p, _ in try self.refund(p) }
        r.registerBlocking(SimAdvanceClock.self) { p, _ in try self.advanceClock(p) }
        r.registerBlocking(SimReceipt.self) { p, _ in try self.currentReceipt(p) }
        r.registerBlocking(SimSetAutoRenew.self) { p, _ in try self.setAutoRenew(p) }
        r.registerBlocking(SimSetNotificationURL.self) { p, _ in
            try self.setNotificationURL(p)
            return EmptyResult()
        }
        r.registerBlocking(SimConsumptionReports.self) { p, _ in try self.consumptionReports(p) }
        r.registerBlocking(SimServerFinishes.self) { p, _ in try self.serverFinishes(p) }
        r.registerBlocking(SimAppTransaction.self) { p, _ in try self.appTransaction(p) }
        r.registerBlocking(SimBilling.self) { p, _ in try self.billing(p) }
        r.registerBlocking(SimRefundDecision.self) { p, _ in try self.refundDecision(p) }
        r.registerBlocking(SimLifecycleEvent.self) { p, _ in try self.lifecycleEvent(p) }
        r.registerBlocking(SimNotify.self) { p, _ in try self.notify(p) }
        r.registerBlocking(SimShareWithFamily.self) { p, _ in try self.shareWithFamily(p) }
        r.registerBlocking(SimSetRealtimeURL.self) { p, _ in
            try self.setRealtimeURL(p)
            return EmptyResult()
        }
        r.register(SimCancelIntent.self) { p, _ in try await self.cancelIntent(p) }
        r.register(SimReviewMessaging.self) { p, _ in try await self.reviewMessaging(p) }
        r.registerImmediate(SimSetNotificationFault.self) { p, _ in
            try self.courier.setFault(p)
            return EmptyResult()
        }
        r.register(SimDeliverNotifications.self) { _, _ in
            // Mass extensions still pending are carried out first (they are otherwise right after their request).
            _ = try? await NIOThreadPool.singleton.runIfActive { try self.completeMassExtensions() }
            return await self.courier.deliver()
        }
        return r
    }
}
