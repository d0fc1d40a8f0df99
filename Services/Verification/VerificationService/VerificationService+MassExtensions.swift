import Foundation
import IAPProtocol
import JSONRPC

/// Mass renewal extensions at Apple (internal token), each field checked as Apple checks it before anything is sent.
extension VerificationService {
    public func massExtendRenewalDate(_ p: VerificationMassExtendRenewalDate.Params) async throws(RPCError)
        -> VerificationMassExtendRenewalDate.Result
    {
        try Self.checkExtension(days: p.extendByDays, reasonCode: p.extendReasonCode)
        try Self.checkMassRequest(productId: p.productId, requestIdentifier: p.requestIdentifier)
        if let codes = p.storefrontCountryCodes {
            guard (1...250).contains(codes.count), codes.allSatisfy({ $0.count == 3 && $0.allSatisfy { $0.isASCII && $0.isUppercase } }) else {
                throw RPCError.invalidParams(
                    "storefrontCountryCodes: ISO 3166-1 alpha-3 codes (USA, FRA...), at least one when given", field: "storefrontCountryCodes",
                    reason: "invalidValue")
            }
        }
        let api = try appStoreAPI(p.internalToken)
        do {
            return .init(
                requestIdentifier: try await api.massExtendRenewalDate(
                    p.environment, productId: p.productId, days: p.extendByDays, reasonCode: p.extendReasonCode,
                    requestIdentifier: p.requestIdentifier, storefronts: p.storefrontCountryCodes))
        } catch {
            throw Self.rpcError(error, transactionId: "")
        }
    }

    public func massExtensionStatus(_ p: VerificationMassExtensionStatus.Params) async throws(RPCError) -> MassExtensionStatus {
        try Self.checkMassRequest(productId: p.productId, requestIdentifier: p.requestIdentifier)
        let api = try appStoreAPI(p.internalToken)
        do {
            return try await api.massExtensionStatus(p.environment, productId: p.productId, requestIdentifier: p.requestIdentifier)
        } catch {
            throw Self.rpcError(error, transactionId: "")
        }
    }

    /// Apple's limits on an extension, single or mass.
    static func checkExtension(days: Int, reasonCode: Int) throws(RPCError) {
        guard (1...90).contains(days) else {
            throw RPCError.invalidParams("extendByDays must be 1-90", field: "extendByDays", reason: "invalidValue")
        }
        guard (0...3).contains(reasonCode) else {
            throw RPCError.invalidParams("extendReasonCode must be 0-3", field: "extendReasonCode", reason: "invalidValue")
        }
    }

    static func checkMassRequest(productId: String, requestIdentifier: String) throws(RPCError) {
        guard !productId.isEmpty, productId.utf8.count <= 256 else {
            throw RPCError.invalidParams("productId must be 1-256 bytes", field: "productId", reason: "invalidValue")
        }
        guard requestIdentifier.count <= 128, UUID(uuidString: requestIdentifier) != nil else {
            throw RPCError.invalidParams("requestIdentifier must be a UUID", field: "requestIdentifier", reason: "invalidValue")
        }
    }
}
