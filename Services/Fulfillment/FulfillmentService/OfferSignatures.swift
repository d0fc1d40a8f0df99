import IAPProtocol
import JSONRPC
import Receipts

/// A promotional offer signed with the offer key, in both of StoreKit's forms: one place for `fulfillment.signOffer` and
/// retention answers.
extension OfferSigningKey {
    /// The original form: base64 DER ECDSA over bundle id, key id, product id, offer id, appAccountToken (lowercase, or
    /// empty), nonce and timestamp.
    func signatureV1(productId: String, offerId: String, appAccountToken: String, nonce: String, nowMs: Int64) throws -> String {
        try PromotionalOffer.signature(
            PromotionalOffer.message(
                bundleId: bundleId, keyId: keyId, productId: productId, offerId: offerId, appAccountToken: appAccountToken, nonce: nonce,
                timestamp: nowMs), key: key)
    }

    /// The JWS form (`aud: promotional-offer`); `transactionId`, optional in Apple's form, names one of the customer's.
    func signatureV2(productId: String, offerId: String, transactionId: String?, nonce: String, nowMs: Int64) throws -> String {
        var claims: [String: JSONValue] = ["productId": .string(productId), "offerIdentifier": .string(offerId)]
        if let transactionId { claims["transactionId"] = .string(transactionId) }
        return try PromotionalOffer.jws(
            audience: "promotional-offer", claims: claims, keyId: keyId, issuerId: issuerId, bundleId: bundleId, nonce: nonce, issuedAtMs: nowMs,
            key: key)
    }
}
