import IAPProtocol
import JSONRPC
import Receipts

/// StoreKit's signed AppTransaction, and Get App Transaction Info: verified as transactions are.
extension VerificationService {
    public func verifyAppTransaction(_ p: VerificationVerifyAppTransaction.Params) async throws(RPCError)
        -> VerificationVerifyAppTransaction.Result
    {
        switch try await decode(p.signedAppTransaction) {
        case .failure(let f): return .init(status: f.status, reason: f.rawValue)
        case .success(let payload): return acceptAppTransaction(payload, expectedBundleId: p.expectedBundleId)
        }
    }

    /// The customer's app transaction from Apple (any of their transaction ids, or its own id), with the same rules.
    public func appTransactionInfo(_ p: VerificationAppTransactionInfo.Params) async throws(RPCError)
        -> VerificationAppTransactionInfo.Result
    {
        let api = try appStoreAPI(p.internalToken)
        do {
            return acceptAppTransaction(try await api.appTransactionInfo(p.transactionId).payload, expectedBundleId: nil)
        } catch {
            var refused = Self.rpcError(error, transactionId: p.transactionId)
            if refused.data.extra["appleErrorCode"] == .int(4_040_019) { refused.data.reason = "appTransactionNotFound" }
            throw refused
        }
    }

    /// The rules for an app transaction whose signature is verified: an id, this app's, a known environment (its
    /// `receiptType`), Xcode only when allowed.
    func acceptAppTransaction(_ payload: JSONValue, expectedBundleId: String?) -> VerificationVerifyAppTransaction.Result {
        // An app transaction names its environment in `receiptType` only; a payload naming one in `environment` too is a
        // transaction or something made to look like both.
        guard AppleAppTransaction(payload) != nil, payload["environment"] == nil else { return .init(status: 21002, reason: "malformed") }
        guard bundleAccepted(payload["bundleId"]?.stringValue, expected: expectedBundleId) else {
            return .init(status: 21003, reason: "bundleMismatch")
        }
        guard let environment = PurchaseEnvironment.fromSignedPayload(payload["receiptType"]?.stringValue) else {
            return .init(status: 21002, reason: "unknownEnvironment")
        }
        if environment == "Xcode", !configuration.allowXcode { return .init(status: 21003, reason: "xcodeNotAllowed") }
        return .init(status: 0, environment: environment, appTransaction: payload)
    }
}
