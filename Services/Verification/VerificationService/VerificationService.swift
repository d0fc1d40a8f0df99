import AppStoreServerAPI
import Foundation
import IAPProtocol
import JSONRPC
import Logging
import PlayDeveloperAPI
import RPCTransport
import Receipts
import ServiceSupport
import X509

public struct VerificationConfiguration: Sendable {
    /// Roots for app receipts: Apple's shipped roots.
    public var receiptRoots: [Certificate] = ShippedTrust.appleRoots
    /// Roots for StoreKit 2 JWS: Apple Root CA - G3 only, as Apple's chains use.
    public var signedPayloadRoots: [Certificate] = [ShippedTrust.certificate(ShippedTrust.appleRootCAG3DER)]
    /// Operator-added anchors (`--trust-anchor`), trusted for both.
    public var extraRoots: [Certificate] = []
    /// Also accept receipts whose environment is `Xcode`, signed by the StoreKit test certificate.
    public var allowXcode = false
    /// Expected bundle ids (docs/security.md). Empty refuses every receipt and payload unless
    /// `acceptAnyBundleId` is set. A call's `expectedBundleId` can only narrow this set, never widen it.
    public var bundleIds: Set<String> = []
    /// Development only (`--any-bundle-id`): accept purchases of any app. With it, anyone who builds an app
    /// with this server's product ids gets value for purchases made in that app.
    public var acceptAnyBundleId = false
    /// A verifyReceipt endpoint for `mode: remote` and `auto`; nil refuses remote mode.
    public var remote: RemoteVerification?
    /// In `auto` mode, the local refusals that are handed to the remote endpoint to decide (a chain the
    /// local trust store does not know, an Xcode receipt). Anything else local decides for good.
    public var autoRemoteReasons: Set<String> = ["untrustedChain", "xcodeNotAllowed"]
    /// Apple's App Store Server API (`--app-store-api-key` and friends); nil refuses the methods that need it.
    public var appStoreAPI: AppStoreServerAPIClient?
    /// The suite's internal token: `transactionInfo` and `transactionHistory` refuse callers without it.
    public var internalToken: String?
    /// Online revocation checks (OCSP) of receipt and JWS chains (`--ocsp`); nil checks none.
    public var revocation: RevocationChecker?
    /// The app's Apple ID (App Store Connect, `--app-apple-id`): Production retention requests must name it; nil refuses them.
    public var appAppleId: Int64?
    /// Google's Play Developer API (`--play-service-account`, `--play-api-url`); nil refuses the Play methods.
    public var playAPI: PlayDeveloperAPIClient?
    /// The Android package names whose Play purchases are accepted (`--package-name`); empty accepts none.
    public var playPackageNames: Set<String> = []
    /// Checks the OIDC tokens of Google Play's Pub/Sub pushes (`--play-push-audience`, `--play-push-email`,
    /// `--play-certs-url`); nil refuses every push (`playPushNotConfigured`).
    public var playPush: PlayPushTokenVerifier?

    public init() {}
}

/// Decides whether purchases are real without trusting the client: app receipts (PKCS#7) and
/// StoreKit 2 signed transactions and notifications (JWS), checked locally against pinned roots.
/// Answers verifyReceipt-compatible objects: `status` 0, or Apple's failure status with a `reason`.
public final class VerificationService: Sendable {
    private let receipts: ReceiptVerifier
    let payloads: SignedPayloadVerifier
    let configuration: VerificationConfiguration
    let logger: Logger
    private let remote: RemoteReceiptVerifier?

    public init(configuration: VerificationConfiguration, logger: Logger = Logger(label: "verification")) {
        self.configuration = configuration
        self.logger = logger
        self.remote = configuration.remote.map { RemoteReceiptVerifier(configuration: $0, logger: logger) }
        receipts = ReceiptVerifier(
            trust: ReceiptTrust(
                roots: configuration.receiptRoots + configuration.extraRoots,
                xcodeCertificate: configuration.allowXcode ? ShippedTrust.certificate(ShippedTrust.storeKitTestDER) : nil),
            revocation: configuration.revocation)
        payloads = SignedPayloadVerifier(
            roots: configuration.signedPayloadRoots + configuration.extraRoots, allowXcode: configuration.allowXcode,
            revocation: configuration.revocation)
    }

    public func verifyReceipt(_ p: VerificationVerifyReceipt.Params) async throws(RPCError) -> VerifyReceiptResponse {
        // `auto` without an endpoint is simply local.
        if p.mode == .remote, remote == nil {
            throw RPCError.invalidParams(
                "no verifyReceipt URL is configured (--verify-receipt-url); use mode local",
                field: "mode", reason: "remoteNotConfigured")
        }
        if p.mode == .remote, let remote {
            return checkBundle(try await remote.verify(receiptData: p.receiptData), p)
        }
        let local = try await verifyLocally(p)
        if p.mode == .auto, let remote, local.status != 0, let reason = local.reason, configuration.autoRemoteReasons.contains(reason) {
            return checkBundle(try await remote.verify(receiptData: p.receiptData), p)
        }
        return local
    }

    /// The bundle ids a call accepts: the configured ones, narrowed to the call's `expectedBundleId`.
    /// nil accepts any (`acceptAnyBundleId` and no expectation); an empty set accepts none.
    private func acceptedBundles(_ expected: String?) -> Set<String>? {
        if configuration.acceptAnyBundleId { return expected.map { [$0] } }
        guard let expected else { return configuration.bundleIds }
        return configuration.bundleIds.contains(expected) ? [expected] : []
    }

    /// True when `bundleId` may be accepted for a call expecting `expected`.
    private func bundleAccepted(_ bundleId: String?, expected: String? = nil) -> Bool {
        guard let accepted = acceptedBundles(expected) else { return true }
        guard let bundleId else { return false }
        return accepted.contains(bundleId)
    }

    /// A remote answer gets the same bundle and environment checks as a local one.
    private func checkBundle(_ answer: VerifyReceiptResponse, _ p: VerificationVerifyReceipt.Params) -> VerifyReceiptResponse {
        guard answer.status == 0 else { return answer }
        guard bundleAccepted(answer.receipt?.bundleId, expected: p.expectedBundleId) else {
            return VerifyReceiptResponse(status: 21003, reason: "bundleMismatch")
        }
        guard let environment = PurchaseEnvironment.fromSignedPayload(answer.environment), environment != "Xcode" else {
            return VerifyReceiptResponse(status: 21002, reason: "unknownEnvironment")
        }
        var checked = answer
        checked.environment = environment
        return checked
    }

    /// `verifyReceipt`'s answer from memory alone (the receipt's chain validated before, no recheck due, local
    /// mode): nil when the async path must run (a chain to validate, or the remote endpoint to ask).
    public func verifyReceiptFromMemory(_ p: VerificationVerifyReceipt.Params) -> VerifyReceiptResponse? {
        guard p.mode != .remote else { return nil }
        guard let options = receiptOptions(p) else { return VerifyReceiptResponse(status: 21003, reason: "bundleMismatch") }
        guard let result = receipts.verifyFromMemory(base64: p.receiptData, options: options) else { return nil }
        // `auto` may ask the remote endpoint about this failure: that is the async path's.
        if case .failure(let failure) = result, p.mode == .auto, remote != nil, configuration.autoRemoteReasons.contains(failure.rawValue) {
            return nil
        }
        return Self.response(result)
    }

    private func verifyLocally(_ p: VerificationVerifyReceipt.Params) async throws(RPCError) -> VerifyReceiptResponse {
        guard let options = receiptOptions(p) else { return VerifyReceiptResponse(status: 21003, reason: "bundleMismatch") }
        let result = await receipts.verify(base64: p.receiptData, options: options)
        if case .failure(.revocationUnknown) = result { throw Self.revocationUnknown }
        return Self.response(result)
    }

    /// The verifier's options for a call; nil when the call's expected bundle id is not one this service accepts.
    private func receiptOptions(_ p: VerificationVerifyReceipt.Params) -> ReceiptVerifier.Options? {
        // An empty set refuses every bundle in the verifier; nil (any) is the verifier's empty set.
        let accepted = acceptedBundles(p.expectedBundleId)
        if let accepted, accepted.isEmpty { return nil }
        return .init(bundleIds: accepted ?? [], deviceIdentifier: p.deviceIdentifier)
    }

    private static func response(_ result: Result<VerifiedReceipt, ReceiptFailure>) -> VerifyReceiptResponse {
        switch result {
        case .success(let verified):
            VerifyReceiptResponse(status: 0, environment: verified.environment, receipt: VerifyReceiptJSON.body(verified.receipt))
        case .failure(let failure):
            VerifyReceiptResponse(status: failure.status, reason: failure.rawValue)
        }
    }

    /// `verifyTransaction`'s answer from memory alone (the JWS chain validated before, no recheck due); nil when
    /// the async path must validate the chain.
    public func verifyTransactionFromMemory(_ p: VerificationVerifyTransaction.Params) -> VerificationVerifyTransaction.Result? {
        switch payloads.verifiedObjectFromMemory(p.signedTransaction) {
        case nil: return nil
        case .failure(let f): return .init(status: f.status, reason: f.rawValue)
        case .success(let transaction): return accept(transaction, expectedBundleId: p.expectedBundleId)
        }
    }

    public func verifyTransaction(_ p: VerificationVerifyTransaction.Params) async throws(RPCError) -> VerificationVerifyTransaction.Result {
        switch try await decode(p.signedTransaction) {
        case .failure(let f): return .init(status: f.status, reason: f.rawValue)
        case .success(let transaction): return accept(transaction, expectedBundleId: p.expectedBundleId)
        }
    }

    /// The rules for a transaction whose signature is verified: this app's, a known environment, Xcode
    /// only when allowed. Shared by signed transactions sent by apps and those fetched from Apple (which
    /// the App Store Server API client has verified already: their signatures are not checked twice).
    private func accept(_ transaction: JSONValue, expectedBundleId: String?) -> VerificationVerifyTransaction.Result {
        switch judge(transaction, environmentField: "environment", expectedBundleId: expectedBundleId) {
        case .success(let environment): .init(status: 0, environment: environment, transaction: transaction)
        case .failure(let refusal): .init(status: refusal.status, reason: refusal.reason)
        }
    }

    struct Refusal: Error {
        let status: Int
        let reason: String
    }

    /// The checks of a verified payload (transaction or app transaction): this app's bundle id, a known environment (read
    /// from `environmentField`), Xcode only when allowed. Answers the environment.
    func judge(_ payload: JSONValue, environmentField: String, expectedBundleId: String?) -> Result<String, Refusal> {
        guard bundleAccepted(payload["bundleId"]?.stringValue, expected: expectedBundleId) else {
            return .failure(.init(status: 21003, reason: "bundleMismatch"))
        }
        guard let environment = PurchaseEnvironment.fromSignedPayload(payload[environmentField]?.stringValue) else {
            return .failure(.init(status: 21002, reason: "unknownEnvironment"))
        }
        if environment == "Xcode", !configuration.allowXcode { return .failure(.init(status: 21003, reason: "xcodeNotAllowed")) }
        return .success(environment)
    }

    // MARK: App Store Server API

    /// One transaction from Apple, verified as `verifyTransaction` verifies a JWS (chain, bundle id, environment).
    public func transactionInfo(_ p: VerificationTransactionInfo.Params) async throws(RPCError) -> VerificationVerifyTransaction.Result {
        let api = try appStoreAPI(p.internalToken)
        do {
            let transaction = try await api.transactionInfo(p.transactionId)
            return accept(transaction.payload, expectedBundleId: nil)
        } catch {
            throw Self.rpcError(error, transactionId: p.transactionId)
        }
    }

    /// The customer's whole history from Apple, every page, each transaction verified.
    public func transactionHistory(_ p: VerificationTransactionHistory.Params) async throws(RPCError)
        -> VerificationTransactionHistory.Result
    {
        let api = try appStoreAPI(p.internalToken)
        var out: [VerificationVerifyTransaction.Result] = []
        do {
            for try await page in api.history(p.transactionId) {
                for transaction in page {
                    out.append(accept(transaction.payload, expectedBundleId: nil))
                }
                guard out.count < VerificationTransactionHistory.maxTransactions else {
                    throw RPCError.conflict(
                        "the history holds more than \(VerificationTransactionHistory.maxTransactions) transactions", reason: "historyTooLong")
                }
            }
        } catch let error as RPCError {
            throw error
        } catch {
            throw Self.rpcError(error, transactionId: p.transactionId)
        }
        return .init(transactions: out)
    }

    /// An order's transactions from Apple, each verified (none for an order id Apple does not know).
    public func lookUpOrder(_ p: VerificationLookUpOrder.Params) async throws(RPCError) -> VerificationTransactionHistory.Result {
        guard (1...64).contains(p.orderId.utf8.count), p.orderId.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) else {
            throw RPCError.invalidParams("an order id is letters and digits", field: "orderId", reason: "invalidValue")
        }
        let api = try appStoreAPI(p.internalToken)
        var out: [VerificationVerifyTransaction.Result] = []
        do {
            for transaction in try await api.lookUpOrder(p.orderId) {
                out.append(accept(transaction.payload, expectedBundleId: nil))
            }
        } catch {
            throw Self.rpcError(error, transactionId: p.orderId)
        }
        return .init(transactions: out)
    }

    public func subscriptionStatuses(_ p: VerificationSubscriptionStatuses.Params) async throws(RPCError)
        -> VerificationSubscriptionStatuses.Result
    {
        for status in p.statuses ?? [] where !(1...5).contains(status) {
            throw RPCError.invalidParams("statuses are 1-5", field: "statuses", reason: "invalidValue")
        }
        let api = try appStoreAPI(p.internalToken)
        do {
            let entries = try await api.subscriptionStatuses(p.transactionId, statuses: p.statuses ?? [])
            return .init(
                subscriptions: entries.map {
                    AppleSubscriptionStatus(
                        subscriptionGroupIdentifier: $0.subscriptionGroupIdentifier, status: $0.status,
                        originalTransactionId: $0.originalTransactionId,
                        transaction: $0.transaction.payload, renewalInfo: $0.renewalInfo.payload,
                        signedTransactionInfo: $0.transaction.signedTransaction,
                        signedRenewalInfo: $0.renewalInfo.signed)
                })
        } catch {
            throw Self.rpcError(error, transactionId: p.transactionId)
        }
    }

    public func refundHistory(_ p: VerificationRefundHistory.Params) async throws(RPCError) -> VerificationRefundHistory.Result {
        let api = try appStoreAPI(p.internalToken)
        do {
            let refunded = try await api.refundHistory(p.transactionId, limit: VerificationTransactionHistory.maxTransactions)
            return .init(transactions: refunded.map { accept($0.payload, expectedBundleId: nil) })
        } catch {
            throw Self.rpcError(error, transactionId: p.transactionId)
        }
    }

    public func notificationHistory(_ p: VerificationNotificationHistory.Params) async throws(RPCError)
        -> VerificationNotificationHistory.Result
    {
        let api = try appStoreAPI(p.internalToken)
        var query = NotificationHistoryQuery(startDateMs: p.startDateMs, endDateMs: p.endDateMs)
        query.notificationType = p.notificationType
        query.notificationSubtype = p.notificationSubtype
        query.transactionId = p.transactionId
        query.onlyFailures = p.onlyFailures
        do {
            let page = try await api.notificationHistory(p.environment, query, paginationToken: p.paginationToken)
            return .init(notifications: page.records.map(Self.record), hasMore: page.hasMore, paginationToken: page.paginationToken)
        } catch {
            throw Self.rpcError(error, transactionId: p.transactionId ?? "")
        }
    }

    public func requestTestNotification(_ p: VerificationRequestTestNotification.Params) async throws(RPCError)
        -> VerificationRequestTestNotification.Result
    {
        let api = try appStoreAPI(p.internalToken)
        do {
            return .init(testNotificationToken: try await api.requestTestNotification(p.environment))
        } catch {
            throw Self.rpcError(error, transactionId: "")
        }
    }

    public func testNotificationStatus(_ p: VerificationTestNotificationStatus.Params) async throws(RPCError) -> AppleNotificationRecord {
        let api = try appStoreAPI(p.internalToken)
        do {
            return Self.record(try await api.testNotificationStatus(p.environment, token: p.testNotificationToken))
        } catch {
            throw Self.rpcError(error, transactionId: p.testNotificationToken)
        }
    }

    public func sendConsumption(_ p: VerificationSendConsumption.Params) async throws(RPCError) {
        let api = try appStoreAPI(p.internalToken)
        do {
            try await api.sendConsumption(p.transactionId, p.consumption)
        } catch {
            throw Self.rpcError(error, transactionId: p.transactionId)
        }
    }

    public func finishTransaction(_ p: VerificationFinishTransaction.Params) async throws(RPCError) {
        let api = try appStoreAPI(p.internalToken)
        do {
            try await api.finishTransaction(p.transactionId)
        } catch {
            throw Self.rpcError(error, transactionId: p.transactionId)
        }
    }

    public func setAppAccountToken(_ p: VerificationSetAppAccountToken.Params) async throws(RPCError) {
        guard UUID(uuidString: p.appAccountToken) != nil else {
            throw RPCError.invalidParams("appAccountToken must be a UUID", field: "appAccountToken", reason: "invalidValue")
        }
        let api = try appStoreAPI(p.internalToken)
        do {
            try await api.setAppAccountToken(originalTransactionId: p.originalTransactionId, appAccountToken: p.appAccountToken)
        } catch {
            throw Self.rpcError(error, transactionId: p.originalTransactionId)
        }
    }

    public func extendRenewalDate(_ p: VerificationExtendRenewalDate.Params) async throws(RPCError) -> VerificationExtendRenewalDate.Result {
        try Self.checkExtension(days: p.extendByDays, reasonCode: p.extendReasonCode)
        guard (1...128).contains(p.requestIdentifier.count) else {
            throw RPCError.invalidParams("requestIdentifier must be 1-128 characters", field: "requestIdentifier", reason: "invalidValue")
        }
        let api = try appStoreAPI(p.internalToken)
        do {
            let answer = try await api.extendRenewalDate(
                originalTransactionId: p.originalTransactionId, days: p.extendByDays, reasonCode: p.extendReasonCode,
                requestIdentifier: p.requestIdentifier)
            return .init(
                originalTransactionId: answer.originalTransactionId, webOrderLineItemId: answer.webOrderLineItemId, success: answer.success,
                effectiveDateMs: answer.effectiveDateMs)
        } catch {
            throw Self.rpcError(error, transactionId: p.originalTransactionId)
        }
    }

    static func record(_ r: NotificationRecord) -> AppleNotificationRecord {
        let n = r.notification.payload
        return AppleNotificationRecord(
            notificationUUID: n["notificationUUID"]?.stringValue, notificationType: n["notificationType"]?.stringValue,
            subtype: n["subtype"]?.stringValue, signedDateMs: n["signedDate"]?.millisecondsValue, signedPayload: r.notification.signed,
            sendAttempts: r.sendAttempts.map { AppleSendAttempt(attemptDateMs: $0.attemptDateMs, result: $0.result) })
    }

    func appStoreAPI(_ presented: String) throws(RPCError) -> AppStoreServerAPIClient {
        try TokenGate.internal.check(presented, configured: configuration.internalToken)
        guard let api = configuration.appStoreAPI else {
            throw RPCError(
                code: .unavailable,
                message: "the App Store Server API is not configured (--app-store-api-key, --app-store-api-key-id, --app-store-api-issuer-id)",
                reason: .appStoreAPINotConfigured)
        }
        return api
    }

    /// Apple's answers as the suite's errors: not found is notFound; a payload that fails verification is
    /// invalidReceipt; rate limits, outages and the network are unavailable (retryable); a refused key is an
    /// internal error (the operator's to fix).
    /// Apple's not-found codes that name something other than a transaction.
    static let notFoundReasons: [Int: String] = [
        4_040_008: "testNotificationNotFound", 4_040_009: "massExtensionNotFound", 4_040_019: "appTransactionNotFound",
    ]

    static func rpcError(_ error: any Error, transactionId: String) -> RPCError {
        guard let error = error as? AppStoreAPIError else { return .unavailable("the App Store Server API could not be reached") }
        switch error {
        case .api(404, let code, let message):
            var e = RPCError.notFound(
                "Apple has nothing for \(transactionId.isEmpty ? "this request" : transactionId) in this app (\(message ?? "not found"))",
                reason: Self.notFoundReasons[code ?? 0] ?? "transactionNotFound")
            if let code { e.data.extra["appleErrorCode"] = .int(Int64(code)) }
            return e
        case .api(403, let code, let message):
            var e = RPCError.conflict("Apple refused: \(message ?? "forbidden")", reason: "appleForbidden")
            if let code { e.data.extra["appleErrorCode"] = .int(Int64(code)) }
            return e
        case .api(400, let code, let message):
            var e = RPCError.invalidParams("Apple refused the request: \(message ?? "invalid")", field: "transactionId", reason: "appleBadRequest")
            if let code { e.data.extra["appleErrorCode"] = .int(Int64(code)) }
            return e
        case .api(let status, let code, _):
            var e = RPCError.unavailable("the App Store Server API answered HTTP \(status); retry later", reason: "appStoreAPIUnavailable")
            if let code { e.data.extra["appleErrorCode"] = .int(Int64(code)) }
            return e
        case .unauthorized:
            return .internalError("the App Store Server API refused this server's key (key id, issuer id, key or bundle id)")
        case .verification(.revocationUnknown):
            return revocationUnknown  // retryable: nothing is known against the transaction
        case .verification(let failure):
            return .invalidReceipt(status: failure.status, reason: failure.rawValue, detail: "a transaction from Apple failed verification")
        case .bundleMismatch:
            return .invalidReceipt(status: 21003, reason: "bundleMismatch", detail: "a transaction from Apple names another app")
        case .malformedResponse:
            return .unavailable("the App Store Server API answered something unreadable", reason: "appStoreAPIUnavailable")
        case .transport(let detail):
            return .unavailable("the App Store Server API could not be reached (\(detail))", reason: "appStoreAPIUnavailable")
        }
    }

    /// App Store Server Notifications v2: the outer payload, and the signed transaction and renewal
    /// info inside it, each verified; decoded copies are added as `transactionInfo` / `renewalInfo`.
    public func verifyNotification(_ p: VerificationVerifyNotification.Params) async throws(RPCError)
        -> VerificationVerifyNotification.Result
    {
        // The checks run from memory; each JWS whose chain is not known yet (the notification's, then the ones it
        // carries) is verified on the async path first (at most three rounds).
        var answers: [String: Result<JSONValue, JWSFailure>] = [:]
        while true {
            var missing: String?
            let checked = checkNotification(p) { jws in
                if let known = answers[jws] ?? payloads.verifiedObjectFromMemory(jws, xcode: false) { return known }
                missing = jws
                return nil
            }
            if let checked { return checked }
            guard let jws = missing else { return .init(status: 21002, reason: "malformed") }
            answers[jws] = try await decode(jws, xcode: false)
        }
    }

    /// `verifyNotification`'s answer from memory alone (every chain it carries known, no recheck due); nil when
    /// the async path must validate a chain.
    public func verifyNotificationFromMemory(_ p: VerificationVerifyNotification.Params) -> VerificationVerifyNotification.Result? {
        checkNotification(p) { payloads.verifiedObjectFromMemory($0, xcode: false) }
    }

    /// Every check of a notification, with its JWS decoded by `decode`; nil when `decode` has no answer for one.
    /// Only what a chain to a configured root signed goes on: `decode` refuses Xcode's self-signed form, nested
    /// objects sent unsigned are dropped, and the nested transaction names the notification's environment.
    private func checkNotification(
        _ p: VerificationVerifyNotification.Params, decode: (String) -> Result<JSONValue, JWSFailure>?
    ) -> VerificationVerifyNotification.Result? {
        let notification: JSONValue
        switch decode(p.signedPayload) {
        case nil: return nil
        case .success(let value): notification = value
        case .failure(let f): return .init(status: f.status, reason: f.rawValue)
        }
        guard case .object(var root) = notification else { return .init(status: 21002, reason: "malformed") }
        // Apple puts the app's bundle id in `data`, or in `summary` (mass renewal extensions), or in
        // `externalPurchaseToken`; a notification naming none is not known to be for this app.
        let section = ["data", "summary", "externalPurchaseToken"].first { root[$0]?.objectValue != nil }
        guard let section, case .object(var data)? = root[section] else {
            return .init(status: 21003, reason: "bundleMismatch")
        }
        guard bundleAccepted(data["bundleId"]?.stringValue) else { return .init(status: 21003, reason: "bundleMismatch") }
        let environment = data["environment"]?.stringValue
        if section == "data", environment != nil, PurchaseEnvironment.fromSignedPayload(environment) == nil {
            return .init(status: 21002, reason: "unknownEnvironment")
        }
        for (signedKey, decodedKey) in [("signedTransactionInfo", "transactionInfo"), ("signedRenewalInfo", "renewalInfo")] {
            data[decodedKey] = nil  // only ever the decoded signed form: a plain object sent beside it is the sender's word
            guard let nested = data[signedKey]?.stringValue else { continue }
            switch decode(nested) {
            case nil: return nil
            case .success(let value):
                // The nested payloads must be about the same app and the same environment as the notification.
                if let bundle = value["bundleId"]?.stringValue, !bundleAccepted(bundle) || bundle != data["bundleId"]?.stringValue {
                    return .init(status: 21003, reason: "\(signedKey): bundleMismatch")
                }
                if decodedKey == "transactionInfo", value["bundleId"]?.stringValue == nil {
                    return .init(status: 21003, reason: "\(signedKey): bundleMismatch")
                }
                let nestedEnvironment = value["environment"]?.stringValue
                if nestedEnvironment != environment && (nestedEnvironment != nil || decodedKey == "transactionInfo") {
                    return .init(status: 21003, reason: "\(signedKey): environmentMismatch")
                }
                data[decodedKey] = value
            case .failure(let f): return .init(status: f.status, reason: "\(signedKey): \(f.rawValue)")
            }
        }
        root[section] = .object(data)
        return .init(status: 0, notification: .object(root))
    }

    /// A verified JWS, or why not; a revocation status that could not be learnt (hard-fail) is no answer about
    /// the payload: `unavailable`, so the caller tries again (and Apple retries a notification).
    func decode(_ jws: String, xcode: Bool = true) async throws(RPCError) -> Result<JSONValue, JWSFailure> {
        let result = await payloads.verifiedObject(jws, xcode: xcode)
        if case .failure(.revocationUnknown) = result { throw Self.revocationUnknown }
        return result
    }

    static let revocationUnknown = RPCError.unavailable(
        "the certificates' revocation status could not be checked (OCSP responder unreachable, hard-fail); retry later",
        reason: "revocationUnknown")

    /// The `verification.*` methods of the v1 contract, on this service.
    public func router() -> RPCRouter {
        var r = RPCRouter()
        // The two hot methods answer on the event loop when the chain is known: a verification is CPU work only.
        r.registerImmediateOrAsync(VerificationVerifyReceipt.self) { p, _ in
            self.verifyReceiptFromMemory(p)
        } handler: { p, _ in
            try await self.verifyReceipt(p)
        }
        r.registerImmediateOrAsync(VerificationVerifyTransaction.self) { p, _ in
            self.verifyTransactionFromMemory(p)
        } handler: { p, _ in
            try await self.verifyTransaction(p)
        }
        r.registerImmediateOrAsync(VerificationVerifyNotification.self) { p, _ in
            self.verifyNotificationFromMemory(p)
        } handler: { p, _ in
            try await self.verifyNotification(p)
        }
        r.register(VerificationTransactionInfo.self) { p, _ in try await self.transactionInfo(p) }
        r.register(VerificationVerifyPlayPurchase.self) { p, _ in try await self.verifyPlayPurchase(p) }
        r.register(VerificationVerifyPlayPush.self) { p, _ in try await self.verifyPlayPush(p) }
        r.register(VerificationPlayVoidedPurchases.self) { p, _ in try await self.playVoidedPurchases(p) }
        r.register(VerificationAcknowledgePlayPurchase.self) { p, _ in
            try await self.acknowledgePlayPurchase(p)
            return EmptyResult()
        }
        r.register(VerificationTransactionHistory.self) { p, _ in try await self.transactionHistory(p) }
        r.register(VerificationLookUpOrder.self) { p, _ in try await self.lookUpOrder(p) }
        r.register(VerificationSubscriptionStatuses.self) { p, _ in try await self.subscriptionStatuses(p) }
        r.register(VerificationRefundHistory.self) { p, _ in try await self.refundHistory(p) }
        r.register(VerificationNotificationHistory.self) { p, _ in try await self.notificationHistory(p) }
        r.register(VerificationRequestTestNotification.self) { p, _ in try await self.requestTestNotification(p) }
        r.register(VerificationTestNotificationStatus.self) { p, _ in try await self.testNotificationStatus(p) }
        r.register(VerificationSendConsumption.self) { p, _ in
            try await self.sendConsumption(p)
            return EmptyResult()
        }
        r.register(VerificationVerifyAppTransaction.self) { p, _ in try await self.verifyAppTransaction(p) }
        r.register(VerificationMassExtendRenewalDate.self) { p, _ in try await self.massExtendRenewalDate(p) }
        r.register(VerificationMassExtensionStatus.self) { p, _ in try await self.massExtensionStatus(p) }
        r.register(VerificationVerifyRealtimeRequest.self) { p, _ in try await self.verifyRealtimeRequest(p) }
        r.register(VerificationAppTransactionInfo.self) { p, _ in try await self.appTransactionInfo(p) }
        r.register(VerificationFinishTransaction.self) { p, _ in
            try await self.finishTransaction(p)
            return EmptyResult()
        }
        r.register(VerificationSetAppAccountToken.self) { p, _ in
            try await self.setAppAccountToken(p)
            return EmptyResult()
        }
        r.register(VerificationExtendRenewalDate.self) { p, _ in try await self.extendRenewalDate(p) }
        return r
    }
}
