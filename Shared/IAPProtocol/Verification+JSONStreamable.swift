import JSONRPC

// verifyReceipt's answer carries every purchase of a receipt (17 optional fields each); written by hand it skips
// the generic Encoder's per-field containers (about 6% of verification's CPU at 5 purchases). The keys are
// the CodingKeys of Verification.swift; StreamableParityTests checks each writer against its Codable
// encoding with every field set and with none.

extension VerifyReceiptResponse: JSONStreamable {
    public func writeJSON(to w: JSONStreamWriter) {
        w.beginObject()
        w.member("status", first: true); w.writeInteger(status)
        if let reason { w.member("reason", first: false); w.writeString(reason) }
        if let environment { w.member("environment", first: false); w.writeString(environment) }
        if let receipt { w.member("receipt", first: false); receipt.writeJSON(to: w) }
        w.endObject()
    }
}

extension ReceiptBody: JSONStreamable {
    public func writeJSON(to w: JSONStreamWriter) {
        w.beginObject()
        var first = true
        func optional(_ key: StaticString, _ value: String?) {
            guard let value else { return }
            w.member(key, first: first); w.writeString(value)
            first = false
        }
        optional("receipt_type", receiptType)
        optional("app_item_id", appItemId)
        w.member("bundle_id", first: first); w.writeString(bundleId)
        first = false
        optional("application_version", applicationVersion)
        optional("original_application_version", originalApplicationVersion)
        optional("receipt_creation_date", receiptCreationDate)
        optional("receipt_creation_date_ms", receiptCreationDateMs)
        optional("original_purchase_date", originalPurchaseDate)
        optional("original_purchase_date_ms", originalPurchaseDateMs)
        optional("expiration_date", expirationDate)
        optional("expiration_date_ms", expirationDateMs)
        w.member("in_app", first: false)
        w.writeArray(inApp)
        w.endObject()
    }
}

extension InAppPurchase: JSONStreamable {
    public func writeJSON(to w: JSONStreamWriter) {
        w.beginObject()
        func optional(_ key: StaticString, _ value: String?) {
            guard let value else { return }
            w.member(key, first: false); w.writeString(value)
        }
        w.member("quantity", first: true); w.writeString(quantity)
        w.member("product_id", first: false); w.writeString(productId)
        w.member("transaction_id", first: false); w.writeString(transactionId)
        optional("original_transaction_id", originalTransactionId)
        optional("purchase_date", purchaseDate)
        optional("purchase_date_ms", purchaseDateMs)
        optional("original_purchase_date", originalPurchaseDate)
        optional("original_purchase_date_ms", originalPurchaseDateMs)
        optional("expires_date", expiresDate)
        optional("expires_date_ms", expiresDateMs)
        optional("cancellation_date", cancellationDate)
        optional("cancellation_date_ms", cancellationDateMs)
        optional("web_order_line_item_id", webOrderLineItemId)
        optional("is_trial_period", isTrialPeriod)
        optional("is_in_intro_offer_period", isInIntroOfferPeriod)
        optional("promotional_offer_id", promotionalOfferId)
        optional("x_product_type", productType)
        w.endObject()
    }
}
