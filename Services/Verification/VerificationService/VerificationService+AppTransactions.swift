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
            throw Self.rpcError(error, transactionId: p.transactionId)
        }
    }

    /// The rules for an app transaction whose signature is verified: an id, this app's, a known environment (its
    /// `receiptType`), Xcode only when allowed.
    func acceptAppTransaction(_ payload: JSONValue, expectedBundleId: String?) -> VerificationVerifyAppTransaction.Result {
        // An app transaction names its environment in `receiptType` only; a payload naming one in `environment` too is a
        // transaction or something made to look like both.
        guard AppleAppTransaction(payload) != nil, payload["environment"] == nil else { return .init(status: 21002, reason: "malformed") }
        switch judge(payload, environmentField: "receiptType", expectedBundleId: expectedBundleId) {
        case .success(let environment): return .init(status: 0, environment: environment, appTransaction: payload)
        case .failure(let refusal): return .init(status: refusal.status, reason: refusal.reason)
        }
    }
}
