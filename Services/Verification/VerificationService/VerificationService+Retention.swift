import Foundation
import IAPProtocol
import JSONRPC
import Receipts

/// Retention Messaging's Get Retention Message request (`RealtimeRequestBody`), verified as Apple asks of the app's server.
extension VerificationService {
    /// The JWS chain to the configured roots (the leaf Apple marks for signed App Store data, as for notifications), every
    /// field of Apple's DecodedRealtimeRequestBody present, `Production` or `Sandbox`, and in Production the app's own
    /// `appAppleId` (Apple: a request naming another app is not answered; the Sandbox has no app Apple ID to match).
    public func verifyRealtimeRequest(_ p: VerificationVerifyRealtimeRequest.Params) async throws(RPCError)
        -> VerificationVerifyRealtimeRequest.Result
    {
        let decoded: Result<JSONValue, JWSFailure>
        if let known = payloads.verifiedObjectFromMemory(p.signedPayload, xcode: false) {
            decoded = known
        } else {
            decoded = try await decode(p.signedPayload, xcode: false)
        }
        switch decoded {
        case .failure(let f): return .init(status: f.status, reason: f.rawValue)
        case .success(let payload): return Self.realtimeRequest(payload, appAppleId: configuration.appAppleId)
        }
    }

    /// The checks of a verified payload's fields (pure).
    static func realtimeRequest(_ payload: JSONValue, appAppleId: Int64?) -> VerificationVerifyRealtimeRequest.Result {
        guard let original = payload["originalTransactionId"]?.stringValue, isTransactionId(original),
            let appleId = payload["appAppleId"]?.intValue, let productId = payload["productId"]?.stringValue, !productId.isEmpty,
            productId.utf8.count <= 200, let locale = payload["userLocale"]?.stringValue, (1...35).contains(locale.utf8.count),
            let requestId = payload["requestIdentifier"]?.stringValue, UUID(uuidString: requestId) != nil,
            let signedDate = payload["signedDate"]?.intValue
        else { return .init(status: 21002, reason: "malformed") }
        guard let environment = payload["environment"]?.stringValue, ["Production", "Sandbox"].contains(environment) else {
            return .init(status: 21002, reason: "unknownEnvironment")
        }
        if environment == "Production" {
            guard let appAppleId else { return .init(status: 21003, reason: "appAppleIdNotConfigured") }
            guard appleId == appAppleId else { return .init(status: 21003, reason: "appAppleIdMismatch") }
        }
        return .init(
            status: 0,
            request: .init(
                originalTransactionId: original, appAppleId: appleId, productId: productId, userLocale: locale,
                requestIdentifier: requestId.lowercased(), environment: environment, signedDate: signedDate))
    }

    private static func isTransactionId(_ id: String) -> Bool { (1...32).contains(id.utf8.count) && id.allSatisfy(\.isASCIIDigit) }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
