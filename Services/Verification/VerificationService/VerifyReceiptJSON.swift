import IAPProtocol
import Receipts

/// A decoded receipt in verifyReceipt's JSON shape (docs/receipts.md, "The verifyReceipt answer").
enum VerifyReceiptJSON {
    static func body(_ r: Receipt) -> ReceiptBody {
        var body = ReceiptBody(bundleId: r.bundleId, inApp: r.inApp.map(inApp))
        body.receiptType = r.receiptType
        body.appItemId = r.appItemId.map(String.init)
        body.applicationVersion = r.applicationVersion
        body.originalApplicationVersion = r.originalApplicationVersion
        (body.receiptCreationDate, body.receiptCreationDateMs) = date(r.creationDateMs)
        (body.originalPurchaseDate, body.originalPurchaseDateMs) = date(r.originalPurchaseDateMs)
        (body.expirationDate, body.expirationDateMs) = date(r.expirationDateMs)
        return body
    }

    static func inApp(_ p: InAppPurchaseReceipt) -> InAppPurchase {
        var out = InAppPurchase(quantity: String(p.quantity ?? 1), productId: p.productId, transactionId: p.transactionId)
        out.originalTransactionId = p.originalTransactionId
        (out.purchaseDate, out.purchaseDateMs) = date(p.purchaseDateMs)
        (out.originalPurchaseDate, out.originalPurchaseDateMs) = date(p.originalPurchaseDateMs)
        (out.expiresDate, out.expiresDateMs) = date(p.expiresDateMs)
        (out.cancellationDate, out.cancellationDateMs) = date(p.cancellationDateMs)
        out.webOrderLineItemId = p.webOrderLineItemId.map(String.init)
        out.isTrialPeriod = p.isTrialPeriod.map { $0 ? "true" : "false" }
        out.isInIntroOfferPeriod = p.isInIntroOfferPeriod.map { $0 ? "true" : "false" }
        out.promotionalOfferId = p.promotionalOfferId
        out.productType = p.productType.map(String.init)
        return out
    }

    /// Apple's two forms: `2020-07-22 17:39:08 Etc/GMT` and `"1595439548000"`.
    static func date(_ ms: Int64?) -> (String?, String?) {
        guard let ms else { return (nil, nil) }
        return (ReceiptDate.formatAppleGMT(ms), String(ms))
    }
}
