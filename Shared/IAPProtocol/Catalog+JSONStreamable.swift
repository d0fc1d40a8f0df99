import JSONRPC

// The product listing is the most-served reply of the suite; these writers skip the generic
// Encoder machinery. EncodingTests checks each produces exactly its Codable encoding.

extension Price: JSONStreamable {
    public func writeJSON(to w: JSONStreamWriter) {
        w.beginObject()
        w.member("storefront", first: true); w.writeString(storefront)
        w.member("currency", first: false); w.writeString(currency)
        w.member("amount", first: false); w.writeString(amount)
        if let formatted { w.member("formatted", first: false); w.writeString(formatted) }
        w.endObject()
    }
}

extension Grant: JSONStreamable {
    public func writeJSON(to w: JSONStreamWriter) {
        w.beginObject()
        switch self {
        case .coins(let n):
            w.member("coins", first: true); w.writeInteger(n)
        case let .content(entitlement, ids):
            w.member("entitlement", first: true); w.writeString(entitlement)
            w.member("content", first: false)
            w.beginArray()
            for (i, id) in ids.enumerated() {
                if i > 0 { w.comma() }
                w.writeString(id)
            }
            w.endArray()
        case let .subscription(entitlement, group):
            w.member("entitlement", first: true); w.writeString(entitlement)
            w.member("subscriptionGroup", first: false); w.writeString(group)
        case let .timeLimited(entitlement, days):
            w.member("entitlement", first: true); w.writeString(entitlement)
            w.member("durationDays", first: false); w.writeInteger(days)
        }
        w.endObject()
    }
}

extension Product: JSONStreamable {
    public func writeJSON(to w: JSONStreamWriter) {
        w.beginObject()
        w.member("productId", first: true); w.writeString(productId)
        w.member("type", first: false); w.writeString(type.rawValue)
        w.member("referenceName", first: false); w.writeString(referenceName)
        w.member("title", first: false); w.writeString(title)
        w.member("description", first: false); w.writeString(description)
        w.member("status", first: false); w.writeString(status.rawValue)
        w.member("grant", first: false); grant.writeJSON(to: w)
        if let price { w.member("price", first: false); price.writeJSON(to: w) }
        if let offers {
            w.member("offers", first: false)
            w.writeArray(offers)
        }
        if let googlePlay {
            w.member("googlePlay", first: false)
            w.beginObject()
            w.member("productId", first: true); w.writeString(googlePlay.productId)
            if let plan = googlePlay.basePlanId { w.member("basePlanId", first: false); w.writeString(plan) }
            w.endObject()
        }
        w.endObject()
    }
}

extension SubscriptionOffer: JSONStreamable {
    public func writeJSON(to w: JSONStreamWriter) {
        w.beginObject()
        w.member("offerId", first: true); w.writeString(offerId)
        w.member("type", first: false); w.writeString(type)
        w.member("eligibility", first: false)
        w.beginObject()
        w.member("kind", first: true); w.writeString(eligibility.kind.rawValue)
        if let times = eligibility.times { w.member("times", first: false); w.writeInteger(times) }
        w.endObject()
        if let startsAtMs { w.member("startsAtMs", first: false); w.writeInteger(startsAtMs) }
        if let endsAtMs { w.member("endsAtMs", first: false); w.writeInteger(endsAtMs) }
        w.endObject()
    }
}

extension CatalogListProducts.Result: JSONStreamable {
    public func writeJSON(to w: JSONStreamWriter) {
        w.beginObject()
        w.member("etag", first: true); w.writeString(etag)
        w.member("notModified", first: false); w.writeBool(notModified)
        w.member("products", first: false)
        w.writeArray(products)
        w.endObject()
    }
}
