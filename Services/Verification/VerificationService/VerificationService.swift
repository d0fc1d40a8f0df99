import Foundation
import IAPProtocol
import JSONRPC
import Logging
import Receipts
import RPCTransport
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
    /// Expected bundle ids; empty accepts any (logged at start). A call's `expectedBundleId` wins.
    public var bundleIds: Set<String> = []
    /// A verifyReceipt endpoint for `mode: remote` and `auto`; nil refuses remote mode.
    public var remote: RemoteVerification?
    /// In `auto` mode, the local refusals that are handed to the remote endpoint to decide (a chain the
    /// local trust store does not know, an Xcode receipt). Anything else local decides for good.
    public var autoRemoteReasons: Set<String> = ["untrustedChain", "xcodeNotAllowed"]

    public init() {}
}

/// Decides whether purchases are real without trusting the client: app receipts (PKCS#7) and
/// StoreKit 2 signed transactions and notifications (JWS), checked locally against pinned roots.
/// Answers verifyReceipt-compatible objects: `status` 0, or Apple's failure status with a `reason`.
public final class VerificationService: Sendable {
    private let receipts: ReceiptVerifier
    private let payloads: SignedPayloadVerifier
    private let configuration: VerificationConfiguration
    private let remote: RemoteReceiptVerifier?

    public init(configuration: VerificationConfiguration, logger: Logger = Logger(label: "verification")) {
        self.configuration = configuration
        self.remote = configuration.remote.map { RemoteReceiptVerifier(configuration: $0, logger: logger) }
        receipts = ReceiptVerifier(trust: ReceiptTrust(
            roots: configuration.receiptRoots + configuration.extraRoots,
            xcodeCertificate: configuration.allowXcode ? ShippedTrust.certificate(ShippedTrust.storeKitTestDER) : nil))
        payloads = SignedPayloadVerifier(roots: configuration.signedPayloadRoots + configuration.extraRoots)
    }

    public func verifyReceipt(_ p: VerificationVerifyReceipt.Params) async throws(RPCError) -> VerifyReceiptResponse {
        // `auto` without an endpoint is simply local.
        if p.mode == .remote, remote == nil {
            throw RPCError.invalidParams("no verifyReceipt URL is configured (--verify-receipt-url); use mode local",
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

    /// A remote answer gets the same bundle check as a local one.
    private func checkBundle(_ answer: VerifyReceiptResponse, _ p: VerificationVerifyReceipt.Params) -> VerifyReceiptResponse {
        let expected = p.expectedBundleId.map { Set([$0]) } ?? configuration.bundleIds
        guard answer.status == 0, !expected.isEmpty, let bundle = answer.receipt?.bundleId, !expected.contains(bundle) else { return answer }
        return VerifyReceiptResponse(status: 21003, reason: "bundleMismatch")
    }

    private func verifyLocally(_ p: VerificationVerifyReceipt.Params) async throws(RPCError) -> VerifyReceiptResponse {
        let expected = p.expectedBundleId.map { Set([$0]) } ?? configuration.bundleIds
        switch await receipts.verify(base64: p.receiptData, options: .init(bundleIds: expected, deviceIdentifier: p.deviceIdentifier)) {
        case .success(let verified):
            return VerifyReceiptResponse(status: 0, environment: verified.environment, receipt: VerifyReceiptJSON.body(verified.receipt))
        case .failure(let failure):
            return VerifyReceiptResponse(status: failure.status, reason: failure.rawValue)
        }
    }

    public func verifyTransaction(_ p: VerificationVerifyTransaction.Params) async -> VerificationVerifyTransaction.Result {
        switch await decode(p.signedTransaction) {
        case .failure(let f):
            return .init(status: f.status, reason: f.rawValue)
        case .success(let transaction):
            let expected = p.expectedBundleId.map { Set([$0]) } ?? configuration.bundleIds
            if !expected.isEmpty, !expected.contains(transaction["bundleId"]?.stringValue ?? "") {
                return .init(status: 21003, reason: "bundleMismatch")
            }
            return .init(status: 0, environment: transaction["environment"]?.stringValue, transaction: transaction)
        }
    }

    /// App Store Server Notifications v2: the outer payload, and the signed transaction and renewal
    /// info inside it, each verified; decoded copies are added as `transactionInfo` / `renewalInfo`.
    public func verifyNotification(_ p: VerificationVerifyNotification.Params) async -> VerificationVerifyNotification.Result {
        let notification: JSONValue
        switch await decode(p.signedPayload) {
        case .success(let value): notification = value
        case .failure(let f): return .init(status: f.status, reason: f.rawValue)
        }
        guard case .object(var root) = notification, case .object(var data)? = root["data"] else {
            return .init(status: 0, notification: notification)  // e.g. TEST notifications carry no data
        }
        for (signedKey, decodedKey) in [("signedTransactionInfo", "transactionInfo"), ("signedRenewalInfo", "renewalInfo")] {
            guard let nested = data[signedKey]?.stringValue else { continue }
            switch await decode(nested) {
            case .success(let value): data[decodedKey] = value
            case .failure(let f): return .init(status: f.status, reason: "\(signedKey): \(f.rawValue)")
            }
        }
        if !configuration.bundleIds.isEmpty, let bundle = data["bundleId"]?.stringValue, !configuration.bundleIds.contains(bundle) {
            return .init(status: 21003, reason: "bundleMismatch")
        }
        root["data"] = .object(data)
        return .init(status: 0, notification: .object(root))
    }

    private func decode(_ jws: String) async -> Result<JSONValue, JWSFailure> {
        switch await payloads.verify(jws) {
        case .failure(let f): return .failure(f)
        case .success(let bytes):
            guard let value = try? JSONDecoder().decode(JSONValue.self, from: Data(bytes)), value.objectValue != nil else {
                return .failure(.malformed)
            }
            return .success(value)
        }
    }

    /// The `verification.*` methods of the v1 contract, on this service.
    public func router() -> RPCRouter {
        var r = RPCRouter()
        r.register(VerificationVerifyReceipt.self) { p, _ in try await self.verifyReceipt(p) }
        r.register(VerificationVerifyTransaction.self) { p, _ in await self.verifyTransaction(p) }
        r.register(VerificationVerifyNotification.self) { p, _ in await self.verifyNotification(p) }
        return r
    }
}
